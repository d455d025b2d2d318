// What a GPU's device libraries provide: math, printf, malloc/free, memcpy/memset, the omp_
// API, declare-target functions and a function pointer taken on the device. No finding.
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma omp declare target
static double square(double v) { return v * v; }
static double apply(double (*f)(double), double v) { return f(v); }
#pragma omp end declare target

int main(void) {
  double x[64], total = 0;
#pragma omp target teams distribute parallel for map(from : x) reduction(+ : total)
  for (int i = 0; i < 64; i++) {
    double *tmp = (double *)malloc(2 * sizeof(double));
    memset(tmp, 0, 2 * sizeof(double));
    tmp[0] = sqrt((double)i) + sin(i) + apply(square, i);
    memcpy(&x[i], tmp, sizeof(double));
    free(tmp);
    total += x[i];
    if (i == 0 && omp_get_team_num() == 0)
      printf("device %d\n", omp_is_initial_device());
  }
  printf("%.3f\n", total);
  return 0;
}
