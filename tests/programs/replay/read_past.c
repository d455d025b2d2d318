// The kernel reads one element past its array (x[n], for i = n-1). Recorded under
// LIBOMPTARGET_CHECK, where each allocation ends against an inaccessible page, the launch
// faults and is recorded; `omp-replay --check` names the read (docs/replay.md).
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  int n = 1000;
  double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  for (int i = 0; i < n; ++i)
    x[i] = i;
#pragma omp target teams distribute parallel for map(to: x[0:n]) map(from: y[0:n])
  for (int i = 0; i < n; ++i)
    y[i] = x[i] + x[i + 1];
  printf("y[0]=%.1f\n", y[0]);
  free(x);
  free(y);
  return 0;
}
