#include <stdio.h>
#include <stdlib.h>
#define N (1 << 17)
static double a[N];

// Large mappings (1 MiB each: the checker asks the system which of their pages the program
// wrote instead of comparing every page), `a` static and `b` from malloc. Kernels read both
// while the host leaves them alone; then the host changes 16 KiB of `b` (and writes one
// element of `a` without changing it) and a kernel reads them with no update: stale data in
// `b` only. After the update the next kernel reads the right values.
int main(void) {
  double *b = malloc(N * sizeof *b);
  double s = 0;
  for (int i = 0; i < N; ++i) a[i] = b[i] = 1;
#pragma omp target enter data map(to: a[0:N], b[0:N])
  for (int k = 0; k < 3; ++k) {
#pragma omp target map(tofrom: s)
    for (int i = 0; i < N; ++i) s += a[i] + b[i];
  }
  for (int i = N / 2; i < N / 2 + 2048; ++i) b[i] = 2;
  a[N / 2] = 1;
#pragma omp target map(tofrom: s)
  for (int i = 0; i < N; ++i) s += a[i] + b[i];
#pragma omp target update to(b[N / 2:2048])
#pragma omp target map(tofrom: s)
  for (int i = 0; i < N; ++i) s += a[i] + b[i];
#pragma omp target exit data map(release: a[0:N], b[0:N])
  printf("s=%.0f\n", s);
  free(b);
  return 0;
}
