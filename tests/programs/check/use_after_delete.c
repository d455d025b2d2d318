// A device pointer kept after its mapping was deleted, used by a later kernel.
#include <stdio.h>
#include <stdlib.h>
#define N 4096

int main(void) {
  double *a = malloc(N * sizeof *a), *d = 0, s = 0;
  for (int i = 0; i < N; ++i) a[i] = 1;
#pragma omp target enter data map(to: a[0:N])
#pragma omp target data use_device_ptr(a)
  { d = a; }
#pragma omp target exit data map(delete: a[0:N])
#pragma omp target map(tofrom: s) is_device_ptr(d)
  for (int i = 0; i < N; ++i) s += d[i];
  printf("s=%.0f\n", s);
  free(a);
  return 0;
}
