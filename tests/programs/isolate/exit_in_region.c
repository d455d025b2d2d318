// Calls exit() inside a target region. On an isolated device the region runs in the device's
// worker process, so the worker ends, not the program: the construct fails naming the
// kernel and its location, and the program follows OMP_TARGET_OFFLOAD.
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  int x = 1;
#pragma omp target map(tofrom : x)
  x += 1;
  printf("first=%d\n", x);
  fflush(stdout);
#pragma omp target map(tofrom : x)
  {
    printf("kernel: exiting\n");
    exit(3);
  }
  printf("after=%d\n", x);
  return 0;
}
