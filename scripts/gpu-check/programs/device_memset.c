// omp_target_memset on device memory (cuMemsetD8 on a GPU) and a kernel that reads what it
// set, then omp_target_memcpy from one device to another (a peer copy where there are two
// GPUs, a copy within the device where there is one).
#include <omp.h>
#include <stdio.h>
#include <string.h>

#define N (1 << 20)

static unsigned char back[N];

int main(void) {
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  int other = dev + 1 < omp_get_num_devices() ? dev + 1 : dev;
  unsigned char *d = omp_target_alloc(N, dev), *e = omp_target_alloc(N, other);
  if (!d || !e) {
    printf("no device memory\n");
    return 1;
  }
  omp_target_memset(d, 0x5a, N, dev);
  omp_target_memset(d + 1000, 0, 24, dev);
  long sum = 0;
#pragma omp target teams distribute parallel for reduction(+ : sum) is_device_ptr(d) device(dev)
  for (int i = 0; i < N; i++)
    sum += d[i];
  printf("kernel sum after memset=%ld\n", sum);
  memset(back, 1, N);
  int rc = omp_target_memcpy(e, d, N, 0, 0, other, dev);
  omp_target_memcpy(back, e, N, 0, 0, host, other);
  long set = 0, zero = 0;
  for (int i = 0; i < N; i++) {
    set += back[i] == 0x5a;
    zero += back[i] == 0;
  }
  printf("device to device rc=%d: %ld set, %ld zero\n", rc, set, zero);
  omp_target_free(e, other);
  omp_target_free(d, dev);
  return 0;
}
