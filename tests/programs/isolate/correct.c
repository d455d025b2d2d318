// A correct program: maps, a data region with updates, a declare-target global, the device
// memory API, a reduction and printf from a kernel. Same output isolated or not.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#pragma omp declare target
int scale = 2;
#pragma omp end declare target

int main(void) {
  int n = 1 << 16;
  double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
  for (int i = 0; i < n; i++) a[i] = i, b[i] = 0;
  printf("host: before the first kernel\n");
#pragma omp target map(to : a[0:n]) map(from : b[0:n])
  {
    printf("kernel: n=%d\n", n);
    for (int i = 0; i < n; i++) b[i] = 2 * a[i];
  }
  printf("host: b[n-1]=%.1f\n", b[n - 1]);

  scale = 3;
#pragma omp target update to(scale)
#pragma omp target data map(tofrom : a[0:n])
  {
#pragma omp target teams distribute parallel for
    for (int i = 0; i < n; i++) a[i] *= scale;
    a[0] = -1; // host copy only
#pragma omp target update from(a[1:2])
    printf("host: a[0..2]=%.1f %.1f %.1f\n", a[0], a[1], a[2]);
  }

  double s = 0;
#pragma omp target teams distribute parallel for reduction(+ : s) map(to : a[0:n])
  for (int i = 0; i < n; i++) s += a[i];
  printf("sum=%.1f\n", s);

  int dev = omp_get_default_device(), host = omp_get_initial_device();
  int *d = omp_target_alloc(64 * sizeof(int), dev);
  int h[64], back[64];
  for (int i = 0; i < 64; i++) h[i] = i * i;
  omp_target_memcpy(d, h, sizeof h, 0, 0, dev, host);
#pragma omp target is_device_ptr(d)
  for (int i = 0; i < 64; i++) d[i] += scale;
  omp_target_memcpy(back, d, sizeof back, 0, 0, host, dev);
  omp_target_free(d, dev);
  printf("back[63]=%d devices=%d\n", back[63], omp_get_num_devices());
  free(a);
  free(b);
  return 0;
}
