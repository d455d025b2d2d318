// Timings for scripts/bench-remote.sh: host->device and device->host of MiB mebibytes,
// and the round trip of an empty kernel. `bench_remote MiB launches`.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 1024;
  int launches = argc > 2 ? atoi(argv[2]) : 2000;
  size_t bytes = mib << 20;
  char *buf = malloc(bytes);
  memset(buf, 7, bytes);
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  char *d = omp_target_alloc(bytes, dev);
  // Warm up both directions: the device images load and the pages are touched.
  omp_target_memcpy(d, buf, bytes, 0, 0, dev, host);
  omp_target_memcpy(buf, d, bytes, 0, 0, host, dev);
#pragma omp target device(dev)
  {}
  double t0 = omp_get_wtime();
  omp_target_memcpy(d, buf, bytes, 0, 0, dev, host);
  double t1 = omp_get_wtime();
  omp_target_memcpy(buf, d, bytes, 0, 0, host, dev);
  double t2 = omp_get_wtime();
  for (int i = 0; i < launches; i++) {
#pragma omp target device(dev)
    {}
  }
  double t3 = omp_get_wtime();
  printf("h2d_MBps=%.1f d2h_MBps=%.1f empty_kernel_us=%.2f check=%d\n", bytes / (t1 - t0) / 1e6,
         bytes / (t2 - t1) / 1e6, (t3 - t2) / launches * 1e6, buf[bytes - 1]);
  omp_target_free(d, dev);
  free(buf);
  return 0;
}
