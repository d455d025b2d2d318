// Recorded with LIBOMPTARGET_RECORD and replayed with omp-replay (docs/replay.md).
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  int n = 10000;
  double a = 2.5;
  double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  for (int i = 0; i < n; ++i) {
    x[i] = i;
    y[i] = 1.0;
  }
  for (int rep = 0; rep < 2; ++rep) {
#pragma omp target teams distribute parallel for map(to: x[0:n]) map(tofrom: y[0:n])
    for (int i = 0; i < n; ++i)
      y[i] = a * x[i] + y[i];
  }
  double sum = 0;
  for (int i = 0; i < n; ++i)
    sum += y[i];
  printf("saxpy sum=%.1f\n", sum);
  free(x);
  free(y);
  return 0;
}
