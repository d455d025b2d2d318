// Device code prints, without flushing, between the host's own lines: on a remote device the
// output must reach the program's stdout/stderr, in order.
#include <stdio.h>

int main(void) {
  printf("host before\n");
#pragma omp target
  {
    printf("kernel line 1\n");
    printf("kernel partial");
  }
  printf(" host after\n");
#pragma omp target
  fprintf(stderr, "kernel to stderr\n");
  for (int i = 0; i < 3; i++) {
#pragma omp target firstprivate(i)
    printf("kernel %d\n", i);
    printf("host %d\n", i);
  }
  return 0;
}
