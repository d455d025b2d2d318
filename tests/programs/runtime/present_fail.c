// A `present` map of data that was never mapped: the runtime must report it with the
// construct's location and stop (offloading is mandatory when devices exist).
#include <stdio.h>

int main(void) {
  int a[4] = {1, 2, 3, 4};
  fprintf(stderr, "before\n");
  #pragma omp target map(present, tofrom : a)
  { a[0] = 0; }
  printf("not reached %d\n", a[0]);
  return 0;
}
