// The device memory API and asynchronous constructs on GPUs, for the CUDA plugin's tests
// (crates/e2e/tests/cuda_plugin.rs): omp_target_memset (cuMemsetD8 on the device),
// omp_target_memcpy from one GPU to another (a peer copy), and a nowait/depend chain. With
// the fake driver kernels do not run: only data travels, so the chain's values stay the
// initial ones.
#include <omp.h>
#include <stdio.h>
#include <string.h>

#define N 4096

static int count(const unsigned char *p, int n, unsigned char byte) {
  int c = 0;
  for (int i = 0; i < n; i++)
    c += p[i] == byte;
  return c;
}

int main(void) {
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  int other = dev + 1 < omp_get_num_devices() ? dev + 1 : dev;
  static unsigned char back[N];
  unsigned char *d = omp_target_alloc(N, dev), *e = omp_target_alloc(N, other);
  if (!d || !e) {
    printf("no device memory\n");
    return 1;
  }
  omp_target_memset(d, 0x5a, N, dev);
  omp_target_memset(d + 100, 0, 50, dev);
  omp_target_memcpy(back, d, N, 0, 0, host, dev);
  printf("memset: %d set, %d zero\n", count(back, N, 0x5a), count(back, N, 0));
  memset(back, 1, N);
  int rc = omp_target_memcpy(e, d, N, 0, 0, other, dev);
  omp_target_memcpy(back, e, N, 0, 0, host, other);
  printf("device to device rc=%d: %d set, %d zero\n", rc, count(back, N, 0x5a), count(back, N, 0));
  omp_target_free(e, other);
  omp_target_free(d, dev);

  int x[64];
  for (int i = 0; i < 64; i++)
    x[i] = i;
#pragma omp target map(tofrom : x) nowait depend(out : x)
  for (int i = 0; i < 64; i++)
    x[i] += 1;
#pragma omp target map(tofrom : x) nowait depend(inout : x)
  for (int i = 0; i < 64; i++)
    x[i] *= 2;
#pragma omp taskwait
  printf("nowait chain done x[5]=%d\n", x[5]);
  return 0;
}
