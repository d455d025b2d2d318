// Issue 12 item 25 (LLVM 22's mapping/is_accessible.cpp): whether host memory is
// accessible from a device, with and without `requires unified_shared_memory`.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef USM
#pragma omp requires unified_shared_memory
#endif

int main(void) {
  int n = 64;
  int *p = malloc(n * sizeof(int));
  int x = 0, shared = 0;
#pragma omp target map(tofrom : x) map(to : shared)
  {
    x = 1;
    shared = 1; // reaches the host only where memory is shared
  }
  printf("device 0: %d\n", omp_target_is_accessible(p, n * sizeof(int), 0));
  printf("initial device: %d\n", omp_target_is_accessible(p, n * sizeof(int), omp_get_initial_device()));
  printf("x=%d shared=%d\n", x, shared);
  free(p);
  return 0;
}
