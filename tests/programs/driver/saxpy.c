// C offload test: a kernel, a reduction, and a device check; prints the same on any runtime.
#include <omp.h>
#include <stdio.h>

#define N 10000

int main(void) {
  static float x[N], y[N];
  for (int i = 0; i < N; i++) {
    x[i] = (float)i;
    y[i] = 1.0f;
  }
  float a = 2.0f;
#pragma omp target teams distribute parallel for map(to : x[0:N]) map(tofrom : y[0:N])
  for (int i = 0; i < N; i++)
    y[i] = a * x[i] + y[i];
  double sum = 0;
#pragma omp target teams distribute parallel for reduction(+ : sum) map(to : y[0:N])
  for (int i = 0; i < N; i++)
    sum += y[i];
  int on_device = -1;
#pragma omp target map(from : on_device)
  on_device = !omp_is_initial_device();
  printf("saxpy sum=%.0f on_device=%d\n", sum, on_device);
  return 0;
}
