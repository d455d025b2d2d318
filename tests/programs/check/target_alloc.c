#include <omp.h>
#include <stdio.h>
#include <string.h>
#define N 4096

// omp_target_alloc memory: correct uses (written by a copy, by a memset-like kernel, by a
// kernel before another reads it; every block freed). With `uninit`, a kernel also reads a
// block nothing wrote; with `leak`, a block is never freed.
int main(int argc, char **argv) {
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  const char *bug = argc > 1 ? argv[1] : "";
  double h[N], s = 0;
  for (int i = 0; i < N; ++i) h[i] = i;
  double *copied = omp_target_alloc(N * sizeof(double), dev);
  double *written = omp_target_alloc(N * sizeof(double), dev);
  double *fresh = omp_target_alloc(N * sizeof(double), dev);
  omp_target_memcpy(copied, h, N * sizeof(double), 0, 0, dev, host);
#pragma omp target is_device_ptr(written)
  for (int i = 0; i < N; ++i) written[i] = 1;
#pragma omp target is_device_ptr(copied, written) map(tofrom: s)
  for (int i = 0; i < N; ++i) s += copied[i] + written[i];
  if (!strcmp(bug, "uninit")) {
#pragma omp target is_device_ptr(fresh) map(tofrom: s)
    for (int i = 0; i < N; ++i) s += fresh[i] * 0;
  }
  printf("%g\n", s);
  omp_target_free(copied, dev);
  omp_target_free(written, dev);
  if (strcmp(bug, "leak"))
    omp_target_free(fresh, dev);
  return 0;
}
