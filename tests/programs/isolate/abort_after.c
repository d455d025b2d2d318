// Aborts (as a failed assert or a fatal runtime error does) while the isolated device's
// worker is running: the worker must be killed and reaped, not left as a zombie.
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  int x = 1;
#pragma omp target map(tofrom : x)
  x += 1;
  printf("x=%d\n", x);
  fflush(stdout);
  abort();
}
