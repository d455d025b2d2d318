// Correct: scalars under `defaultmap(to: scalar)` and `defaultmap(to)` (a loop counter the
// region changes, as validation suites write it): the device's copy is the region's own.
#include <stdio.h>
#define N 1024

int main(void) {
  int a[N], errors = 0;
  int i = 0, n = N;
  double scale = 2.0;
  for (int k = 0; k < N; ++k) a[k] = k;
#pragma omp target map(tofrom: a[0:N]) defaultmap(to: scalar)
  for (i = 0; i < n; ++i) a[i] = (int)(scale * a[i]);
#pragma omp target map(tofrom: a[0:N], errors) defaultmap(to)
  {
    for (i = 0; i < n; ++i) {
      scale = scale + 1;
      if (a[i] != 2 * i) errors++;
    }
  }
  printf("i=%d scale=%.0f errors=%d\n", i, scale, errors);
  return errors;
}
