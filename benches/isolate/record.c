// Kernel record's costs (scripts/bench-replay.sh, issue 21):
//   launch N        ns per empty target and per small-map target (16 doubles tofrom), N each
//   stream N MIB    a BabelStream-like loop (copy, mul, add, triad on three MIB-MiB arrays
//                   mapped once), N iterations: ms per iteration
//   big             one kernel over a 64 MiB array (what omp-replay restores)
//   memcpy          ms for the best of 10 memcpys of 64 MiB (warm pages)
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double best_memcpy_ms(size_t bytes) {
  char *a = malloc(bytes), *b = malloc(bytes);
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  double best = 1e30;
  for (int r = 0; r < 10; r++) {
    double t0 = omp_get_wtime();
    memcpy(b, a, bytes);
    __asm__ volatile("" : : "r"(b) : "memory");  // the copy is used: not elided
    double t = omp_get_wtime() - t0;
    if (t < best) best = t;
  }
  free(a);
  free(b);
  return best * 1e3;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "launch";
  long n = argc > 2 ? atol(argv[2]) : 10000;
  if (!strcmp(mode, "launch")) {
    double a[16] = {0};
#pragma omp target map(tofrom: a)
    a[0] += 1;
    double t0 = omp_get_wtime();
    for (long i = 0; i < n; i++) {
#pragma omp target
      {}
    }
    double t1 = omp_get_wtime();
    for (long i = 0; i < n; i++) {
#pragma omp target map(tofrom: a)
      a[i % 16] += 1;
    }
    double t2 = omp_get_wtime();
    printf("empty_ns=%.0f smallmap_ns=%.0f\n", (t1 - t0) / n * 1e9, (t2 - t1) / n * 1e9);
  } else if (!strcmp(mode, "stream")) {
    long len = (argc > 3 ? atol(argv[3]) : 1) * (1 << 20) / sizeof(double);
    double *a = malloc(len * sizeof *a), *b = malloc(len * sizeof *b), *c = malloc(len * sizeof *c);
    for (long i = 0; i < len; i++) a[i] = 1, b[i] = 2, c[i] = 0;
    double s = 3;
    double t0 = 0;
#pragma omp target data map(tofrom: a[0:len], b[0:len], c[0:len])
    {
      t0 = omp_get_wtime();
      for (long it = 0; it < n; it++) {
#pragma omp target teams distribute parallel for
        for (long i = 0; i < len; i++) c[i] = a[i];
#pragma omp target teams distribute parallel for
        for (long i = 0; i < len; i++) b[i] = s * c[i];
#pragma omp target teams distribute parallel for
        for (long i = 0; i < len; i++) c[i] = a[i] + b[i];
#pragma omp target teams distribute parallel for
        for (long i = 0; i < len; i++) a[i] = b[i] + s * c[i];
      }
    }
    printf("stream_ms_per_iteration=%.3f launches=%ld a0=%.1f\n", (omp_get_wtime() - t0) / n * 1e3, 4 * n, a[0]);
    free(a), free(b), free(c);
  } else if (!strcmp(mode, "big")) {
    long len = (64 << 20) / sizeof(double);
    double *a = malloc(len * sizeof *a);
    for (long i = 0; i < len; i++) a[i] = i;
#pragma omp target teams distribute parallel for map(tofrom: a[0:len])
    for (long i = 0; i < len; i++) a[i] *= 2;
    printf("big a1=%.1f\n", a[1]);
    free(a);
  } else {
    printf("memcpy_ms=%.3f\n", best_memcpy_ms(64 << 20));
  }
  return 0;
}
