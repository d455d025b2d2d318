// The device memory API: alloc, memcpy (all directions), memcpy_rect, associate, mapped ptr.
#include <omp.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  int dev = omp_get_default_device(), host = omp_get_initial_device();
  printf("devices=%d initial=%d\n", omp_get_num_devices(), host);

  int h[16], back[16];
  for (int i = 0; i < 16; i++) h[i] = i * i;
  int *d = omp_target_alloc(sizeof h, dev);
  printf("alloc ok=%d zero-size=%p\n", d != NULL, omp_target_alloc(0, dev));
  printf("memcpy h->d rc=%d\n", omp_target_memcpy(d, h, sizeof h, 0, 0, dev, host));
  #pragma omp target is_device_ptr(d)
  for (int i = 0; i < 16; i++) d[i] += 1;
  memset(back, 0, sizeof back);
  printf("memcpy d->h rc=%d back[4]=%d\n", omp_target_memcpy(back, d, sizeof back, 0, 0, host, dev), back[4]);

  // Device to device, across two devices, with offsets.
  int other = (dev + 1) % omp_get_num_devices();
  int *d2 = omp_target_alloc(sizeof h, other);
  printf("memcpy d->d2 rc=%d\n", omp_target_memcpy(d2, d, 8 * sizeof(int), 0, 8 * sizeof(int), other, dev));
  omp_target_memcpy(back, d2, 8 * sizeof(int), 0, 0, host, other);
  printf("d2[0..2]=%d %d %d\n", back[0], back[1], back[2]);
  printf("null memcpy rc=%d\n", omp_target_memcpy(NULL, h, 4, 0, 0, dev, host));

  // A 3x4 window of a 5x6 matrix.
  int m[5][6], w[3][4];
  for (int i = 0; i < 5; i++) for (int j = 0; j < 6; j++) m[i][j] = 10 * i + j;
  int *dm = omp_target_alloc(sizeof m, dev);
  omp_target_memcpy(dm, m, sizeof m, 0, 0, dev, host);
  size_t vol[2] = {3, 4}, doff[2] = {0, 0}, soff[2] = {1, 2}, ddim[2] = {3, 4}, sdim[2] = {5, 6};
  printf("memcpy_rect rc=%d\n", omp_target_memcpy_rect(w, dm, sizeof(int), 2, vol, doff, soff, ddim, sdim, host, dev));
  printf("window: %d %d %d\n", w[0][0], w[1][2], w[2][3]);
  printf("memcpy_rect dims=%d\n", omp_target_memcpy_rect(NULL, NULL, 0, 0, NULL, NULL, NULL, NULL, NULL, host, dev) > 2);

  // Associate host memory with existing device memory.
  int a[8] = {0};
  int *da = omp_target_alloc(sizeof a, dev);
  printf("associate rc=%d present=%d\n", omp_target_associate_ptr(a, da, sizeof a, 0, dev), omp_target_is_present(a, dev));
  printf("mapped ptr matches=%d\n", omp_get_mapped_ptr(a, dev) == (void *)da);
  #pragma omp target map(tofrom : a)
  for (int i = 0; i < 8; i++) a[i] = i + 100;
  printf("associated region wrote device only: a[1]=%d\n", a[1]);
  omp_target_memcpy(a, da, sizeof a, 0, 0, host, dev);
  printf("after copy back: a[1]=%d\n", a[1]);
  printf("disassociate rc=%d present=%d\n", omp_target_disassociate_ptr(a, dev), omp_target_is_present(a, dev));
  printf("host is_present=%d mapped(host)=%d\n", omp_target_is_present(a, host), omp_get_mapped_ptr(a, host) == (void *)a);

  omp_target_free(d, dev);
  omp_target_free(d2, other);
  omp_target_free(dm, dev);
  omp_target_free(da, dev);
  omp_target_free(NULL, dev);
  void *hp = omp_target_alloc(64, host);
  printf("host alloc ok=%d\n", hp != NULL);
  omp_target_free(hp, host);
  return 0;
}
