// The speed table's OpenMP side (issue 22, "Speed"): an empty `target`, `map(tofrom:)` of 8 KiB
// and 64 MiB, and a BabelStream-like triad on device-resident arrays. One binary, run on our
// runtime and on LLVM's; prints `metric NAME VALUE UNIT` lines (medians of several rounds after a
// warm-up; the triad's best round, as BabelStream reports it).
// usage: omp_bench [full]   — full=1 (default): the sizes of the table; 0: small, for a CPU try.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, n, sizeof *v, by_value);
  return v[n / 2];
}

enum { ROUNDS = 7 };

static void empty_target(int batch) {
  double v[ROUNDS];
  for (int i = 0; i < batch; i++) {
#pragma omp target
    {}
  }
  for (int r = 0; r < ROUNDS; r++) {
    double t0 = now();
    for (int i = 0; i < batch; i++) {
#pragma omp target
      {}
    }
    v[r] = (now() - t0) / batch * 1e6;
  }
  printf("metric empty_target %.3f us\n", median(v, ROUNDS));
}

static void map_small(int batch) {
  enum { SMALL = 8192 };
  char *p = malloc(SMALL);
  memset(p, 1, SMALL);
  double v[ROUNDS];
  for (int r = -1; r < ROUNDS; r++) {  // round -1 warms up
    double t0 = now();
    for (int i = 0; i < batch; i++) {
#pragma omp target map(tofrom : p[0:SMALL])
      { p[0] += 1; }
    }
    if (r >= 0) v[r] = (now() - t0) / batch * 1e6;
  }
  printf("metric map_tofrom_8k %.3f us\n", median(v, ROUNDS));
  printf("check map_tofrom_8k %d\n", p[0] == (char)(1 + (ROUNDS + 1) * batch));
  free(p);
}

static void map_big(size_t bytes) {
  char *p = malloc(bytes);
  memset(p, 1, bytes);
  double v[ROUNDS];
  for (int r = -1; r < ROUNDS; r++) {
    double t0 = now();
#pragma omp target map(tofrom : p[0:bytes])
    { p[bytes - 1] += 1; }
    if (r >= 0) v[r] = (now() - t0) * 1e3;
  }
  double ms = median(v, ROUNDS);
  printf("metric map_tofrom_64m %.3f ms\n", ms);
  printf("metric map_tofrom_64m_bw %.2f GB/s\n", 2.0 * bytes / (ms * 1e-3) / 1e9);
  printf("check map_tofrom_64m %d\n", p[bytes - 1] == (char)(1 + ROUNDS + 1));
  free(p);
}

static void triad(size_t n) {
  double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
  const double s = 0.4;
  for (size_t i = 0; i < n; i++) { a[i] = 0; b[i] = (double)(i % 1000); c[i] = 2.0; }
#pragma omp target enter data map(to : a[0:n], b[0:n], c[0:n])
  double best = 1e30;
  for (int r = -2; r < 20; r++) {
    double t0 = now();
#pragma omp target teams distribute parallel for
    for (size_t i = 0; i < n; i++) a[i] = b[i] + s * c[i];
    double t = now() - t0;
    if (r >= 0 && t < best) best = t;
  }
#pragma omp target exit data map(from : a[0:n]) map(release : b[0:n], c[0:n])
  int ok = 1;
  for (size_t i = 0; i < n; i += n / 97) ok &= a[i] == (double)(i % 1000) + s * 2.0;
  printf("metric triad %.2f GB/s\n", 3.0 * n * sizeof(double) / best / 1e9);
  printf("check triad %d\n", ok);
  free(a); free(b); free(c);
}

int main(int argc, char **argv) {
  int full = argc > 1 ? atoi(argv[1]) : 1;
  int on_device = 0;
#pragma omp target map(from : on_device)
  { on_device = !omp_is_initial_device(); }
  printf("info on_device %d devices %d\n", on_device, omp_get_num_devices());
  empty_target(full ? 2000 : 200);
  map_small(full ? 1000 : 100);
  map_big(full ? (size_t)64 << 20 : (size_t)1 << 20);
  triad(full ? (size_t)1 << 26 : (size_t)1 << 16);  // 3 arrays of 512 MiB on the GPU
  return 0;
}
