// Costs on one device (argv[1], default the last): an empty target region (mean of argv[2]
// runs), then 64 MiB host-to-device and device-to-host copies (omp_target_memcpy, best of
// 5), and, for each further device argv[3], argv[4], ..., 64 MiB from the first device to it.
// With 0 runs, only the copies.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BYTES (64u << 20)

static double best_copy(void *dst, const void *src, int dd, int sd) {
  double best = 1e9;
  for (int r = 0; r < 5; r++) {
    double t = omp_get_wtime();
    if (omp_target_memcpy(dst, src, BYTES, 0, 0, dd, sd))
      return -1;
    t = omp_get_wtime() - t;
    if (t < best)
      best = t;
  }
  return best;
}

int main(int argc, char **argv) {
  int host = omp_get_initial_device();
  int dev = argc > 1 ? atoi(argv[1]) : omp_get_num_devices() - 1;
  int runs = argc > 2 ? atoi(argv[2]) : 2000;
  if (runs > 0) {
    for (int i = 0; i < 100; i++) {
#pragma omp target device(dev)
      {}
    }
    double t = omp_get_wtime();
    for (int i = 0; i < runs; i++) {
#pragma omp target device(dev)
      {}
    }
    t = omp_get_wtime() - t;
    printf("empty target: %.2f us\n", 1e6 * t / runs);
  }
  char *h = malloc(BYTES);
  memset(h, 7, BYTES);
  void *d = omp_target_alloc(BYTES, dev);
  double up = best_copy(d, h, dev, host), down = best_copy(h, d, host, dev);
  printf("64 MiB to device: %.2f GB/s\n", BYTES / up / 1e9);
  printf("64 MiB from device: %.2f GB/s\n", BYTES / down / 1e9);
  for (int k = 3; k < argc; k++) {
    int other = atoi(argv[k]);
    void *o = omp_target_alloc(BYTES, other);
    double across = best_copy(o, d, other, dev);
    printf("64 MiB device %d to device %d: %.2f GB/s\n", dev, other, BYTES / across / 1e9);
    omp_target_free(o, other);
  }
  omp_target_free(d, dev);
  free(h);
  return 0;
}
