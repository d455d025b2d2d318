// BabelStream-like loops for the mapping checker's overhead: large arrays mapped once,
// then copy / mul / add / triad / dot kernels. Prints the best time per iteration.
// Usage: stream [elements] [iterations]
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1L << 24;
  int iters = argc > 2 ? atoi(argv[2]) : 10;
  double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
  for (long i = 0; i < n; ++i) { a[i] = 0.1; b[i] = 0.2; c[i] = 0.0; }
  const double s = 0.4;
  double best = 1e30, dot = 0;
#pragma omp target enter data map(to: a[0:n], b[0:n], c[0:n])
  for (int k = 0; k < iters; ++k) {
    double t = omp_get_wtime();
#pragma omp target teams distribute parallel for
    for (long i = 0; i < n; ++i) c[i] = a[i];
#pragma omp target teams distribute parallel for
    for (long i = 0; i < n; ++i) b[i] = s * c[i];
#pragma omp target teams distribute parallel for
    for (long i = 0; i < n; ++i) c[i] = a[i] + b[i];
#pragma omp target teams distribute parallel for
    for (long i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
    dot = 0;
#pragma omp target teams distribute parallel for reduction(+: dot)
    for (long i = 0; i < n; ++i) dot += a[i] * b[i];
    t = omp_get_wtime() - t;
    if (t < best) best = t;
  }
#pragma omp target exit data map(from: a[0:n], b[0:n], c[0:n])
  printf("iteration_ms=%.3f dot=%.6e\n", best * 1e3, dot);
  free(a); free(b); free(c);
  return 0;
}
