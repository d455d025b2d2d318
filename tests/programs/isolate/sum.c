#include <stdio.h>
#include <stdlib.h>
double sum(double *A, int N) {
  double sum = 0.0;
#pragma omp target map(tofrom: sum)
  for (int i = 0; i < N; ++i) sum += A[i];
  return sum;
}

// The runtime documentation's example above, unmodified: A is never mapped. On the host
// device the kernel reads the program's memory by accident; on a GPU (and on an isolated
// device) it faults.
int main(void) {
  int N = 1 << 20;
  double *A = malloc(N * sizeof *A);
  for (int i = 0; i < N; ++i) A[i] = 1.0;
  printf("sum=%.1f\n", sum(A, N));
  free(A);
  return 0;
}
