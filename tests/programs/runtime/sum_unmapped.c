// The runtime documentation's failing example: a reduction over A without map(to: A[0:N]).
// On a GPU it faults; on the host device it only works by accident.
#include <stddef.h>
#include <stdio.h>

double sum(double *A, size_t N) {
  double s = 0.0;
  #pragma omp target teams distribute parallel for reduction(+ : s)
  for (size_t i = 0; i < N; ++i) s += A[i];
  return s;
}

int main(void) {
  double A[1024];
  for (int i = 0; i < 1024; i++) A[i] = 1.0;
  printf("sum=%.1f\n", sum(A, 1024));
  return 0;
}
