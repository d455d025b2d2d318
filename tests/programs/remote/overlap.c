// Copies to and from a device while a long kernel runs on it: the copies must not wait for
// the kernel. Thread 0 launches a kernel that spins for `secs` seconds; thread 1 copies
// 32 MiB back and forth 4 times meanwhile and reports how long that took.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  double secs = argc > 1 ? atof(argv[1]) : 3.0;
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  size_t n = 32 << 20;
  char *buf = malloc(n), *back = malloc(n);
  memset(buf, 5, n);
  char *d = omp_target_alloc(n, dev);
  double copy_secs = -1, kernel_secs = -1;
  int ok = 1;
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) {
      double t = omp_get_wtime();
#pragma omp target device(dev) map(to : secs)
      {
        double start = omp_get_wtime();
        while (omp_get_wtime() - start < secs) {
        }
      }
      kernel_secs = omp_get_wtime() - t;
    } else {
      double t0 = omp_get_wtime();
      while (omp_get_wtime() - t0 < 0.5) {
      } // let the kernel start
      double t = omp_get_wtime();
      for (int i = 0; i < 4; i++) {
        ok &= omp_target_memcpy(d, buf, n, 0, 0, dev, host) == 0;
        ok &= omp_target_memcpy(back, d, n, 0, 0, host, dev) == 0;
      }
      copy_secs = omp_get_wtime() - t;
    }
  }
  printf("copies ok=%d equal=%d\n", ok, memcmp(buf, back, n) == 0);
  printf("kernel %.2fs, copies during it %.2fs, copies finished first=%d\n", kernel_secs, copy_secs,
         copy_secs + 0.5 < kernel_secs);
  omp_target_free(d, dev);
  return 0;
}
