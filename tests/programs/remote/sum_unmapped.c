// A reduction over A whose data was never mapped: the kernel receives a host pointer. On
// the host device that happens to work (one address space); on a remote device, as on a
// GPU, the kernel faults, and the program must get a device error naming the kernel.
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  const int N = 1 << 22;
  double *A = malloc(N * sizeof *A);
  for (int i = 0; i < N; i++) A[i] = 1.0;
  double sum = 0;
#pragma omp target teams distribute parallel for reduction(+ : sum) map(tofrom : sum)
  for (int i = 0; i < N; i++) sum += A[i];
  printf("sum=%.0f\n", sum);
  free(A);
  return 0;
}
