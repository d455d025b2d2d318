// A kernel follows a pointer made from an integer: the fault is real, but no mapping and no
// pointer argument explains it, so the checker must say that (with the address and the
// nearest mappings), never guess a variable.
#include <stdint.h>
#include <stdio.h>
#define N 1024

int main(void) {
  static double a[N];
  double s = 0;
  uintptr_t bogus = 0x10000;
#pragma omp target map(to: a[0:N]) map(tofrom: s) firstprivate(bogus)
  s = a[0] + *(double *)bogus;
  printf("s=%.0f\n", s);
  return 0;
}
