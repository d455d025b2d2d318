// The kernels of benches/fortran/tdpd_bench.f90 in C, for clang's x86_64 offloading (whose device
// code calls libomp's host entry points, not the CPU device runtime): the same loop as
// `target teams distribute parallel for` and as a host `parallel for`, in one binary and one run.
// Usage: tdpd_bench N. Prints: <kernel> device_s=<s per rep> host_s=<s per rep> check=<0 if equal>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

static int n, nx, reps, batch, rounds;
static double *a, *b, *c, *ah, *u, *v, *vh;

// Device and host batches alternate (as in tdpd_bench.f90); each side's time is its fastest
// batch, per loop.
#define TIME(dev, host, tdev, thost)                                                               \
  do {                                                                                             \
    dev;                                                                                           \
    host;                                                                                          \
    tdev = thost = 1e30;                                                                           \
    for (int k_ = 0; k_ < rounds; k_++) {                                                          \
      double t0_ = omp_get_wtime();                                                                \
      for (int r_ = 0; r_ < batch; r_++) dev;                                                      \
      double t_ = (omp_get_wtime() - t0_) / batch;                                                 \
      if (t_ < tdev) tdev = t_;                                                                    \
      t0_ = omp_get_wtime();                                                                       \
      for (int r_ = 0; r_ < batch; r_++) host;                                                     \
      t_ = (omp_get_wtime() - t0_) / batch;                                                        \
      if (t_ < thost) thost = t_;                                                                  \
    }                                                                                              \
  } while (0)

static void dev_triad(void) {
#pragma omp target teams distribute parallel for
  for (int j = 0; j < n; j++) a[j] = b[j] + 1.5 * c[j];
}
static void host_triad(void) {
#pragma omp parallel for
  for (int j = 0; j < n; j++) ah[j] = b[j] + 1.5 * c[j];
}
static double dev_dot(void) {
  double acc = 0;
#pragma omp target teams distribute parallel for reduction(+ : acc) map(tofrom : acc)
  for (int j = 0; j < n; j++) acc += b[j] * c[j];
  return acc;
}
static double host_dot(void) {
  double acc = 0;
#pragma omp parallel for reduction(+ : acc)
  for (int j = 0; j < n; j++) acc += b[j] * c[j];
  return acc;
}
static void dev_stencil(void) {
#pragma omp target teams distribute parallel for
  for (int j = 1; j < nx - 1; j++)
    for (int i = 1; i < nx - 1; i++)
      v[j * nx + i] = 0.5 * u[j * nx + i] +
                      0.125 * (u[j * nx + i - 1] + u[j * nx + i + 1] + u[(j - 1) * nx + i] + u[(j + 1) * nx + i]);
}
static void host_stencil(void) {
#pragma omp parallel for
  for (int j = 1; j < nx - 1; j++)
    for (int i = 1; i < nx - 1; i++)
      vh[j * nx + i] = 0.5 * u[j * nx + i] +
                       0.125 * (u[j * nx + i - 1] + u[j * nx + i + 1] + u[(j - 1) * nx + i] + u[(j + 1) * nx + i]);
}
static void dev_exp(void) {
#pragma omp target teams distribute parallel for
  for (int j = 0; j < n; j++) a[j] = exp(-b[j]) * c[j];
}
static void host_exp(void) {
#pragma omp parallel for
  for (int j = 0; j < n; j++) ah[j] = exp(-b[j]) * c[j];
}

int main(int argc, char **argv) {
  n = argc > 1 ? atoi(argv[1]) : 8000000;
  if (n < 1024) n = 1024;
  nx = (int)sqrt((double)n);
  reps = 40000000 / n > 3 ? 40000000 / n : 3;
  batch = reps / 100 > 1 ? reps / 100 : 1;
  rounds = reps / batch > 3 ? reps / batch : 3;
  size_t m = (size_t)nx * nx;
  a = calloc(n, sizeof *a), b = malloc(n * sizeof *b), c = malloc(n * sizeof *c), ah = calloc(n, sizeof *ah);
  u = malloc(m * sizeof *u), v = calloc(m, sizeof *v), vh = calloc(m, sizeof *vh);
  if (!a || !b || !c || !ah || !u || !v || !vh) return 1;
  for (int i = 0; i < n; i++) b[i] = 1.0 + ((i + 1) % 1000) * 1e-3, c[i] = 2.0 - ((i + 1) % 777) * 1e-3;
  for (int j = 0; j < nx; j++)
    for (int i = 0; i < nx; i++) u[j * nx + i] = sin(0.001 * (i + 1) * (j + 1));
#pragma omp target enter data map(to : a[0:n], b[0:n], c[0:n], u[0:m], v[0:m])
  double td, th, s = 0, sh = 0;
  int bad = 0;

  TIME(dev_triad(), host_triad(), td, th);
#pragma omp target update from(a[0:n])
  for (int i = 0; i < n; i++) bad += a[i] != ah[i];
  printf("triad device_s=%10.3e host_s=%10.3e check=%d\n", td, th, bad);

  TIME(s = dev_dot(), sh = host_dot(), td, th);
  printf("dot device_s=%10.3e host_s=%10.3e check=%d\n", td, th, fabs(s - sh) > 1e-12 * fabs(sh));

  TIME(dev_stencil(), host_stencil(), td, th);
#pragma omp target update from(v[0:m])
  bad = 0;
  for (size_t i = 0; i < m; i++) bad += v[i] != vh[i];
  printf("stencil device_s=%10.3e host_s=%10.3e check=%d\n", td, th, bad);

  TIME(dev_exp(), host_exp(), td, th);
#pragma omp target update from(a[0:n])
  bad = 0;
  for (int i = 0; i < n; i++) bad += fabs(a[i] - ah[i]) > 1e-14 * fabs(ah[i]);
  printf("exp device_s=%10.3e host_s=%10.3e check=%d\n", td, th, bad);
#pragma omp target exit data map(delete : a[0:n], b[0:n], c[0:n], u[0:m], v[0:m])
  return 0;
}
