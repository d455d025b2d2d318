#include <stdio.h>
#define N 4096
static double a[N];

// The host changes `a` after it was copied to the device and never updates the device:
// the kernel sums the old values.
int main(void) {
  double s = 0;
  for (int i = 0; i < N; ++i) a[i] = 1;
#pragma omp target enter data map(to: a[0:N])
  for (int i = 0; i < N; ++i) a[i] = 2;
#pragma omp target map(tofrom: s)
  for (int i = 0; i < N; ++i) s += a[i];
#pragma omp target exit data map(release: a[0:N])
  printf("s=%.0f\n", s);
  return 0;
}
