// Large copies to, from and between MPI devices (docs/cluster.md, "Copies"), byte for byte:
// 48 MiB and an odd tail from the program to device 4 (device 0 of MPI rank 1), from there to
// device 8 (device 0 of rank 2, rank to rank) and to device 5 (within rank 1), and back to the
// program; a part at odd offsets
// that ends at its allocation's last byte; a mapped array a kernel changes; and a
// declare-target array (memory of the worker's image, not an allocation). Kernels on the
// devices count the bytes that differ.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N ((48ul << 20) + 13)
#define PART ((3ul << 20) + 5)
#define G (3ul << 20)

static unsigned char value(size_t i) { return (unsigned char)(i * 131 + (i >> 13)); }
#pragma omp declare target(value)

unsigned char global[G];
#pragma omp declare target(global)

// Bytes of `p[0:n]` on device `d` that are not value(i + shift).
static long differ_on(int d, const unsigned char *p, size_t n, size_t shift) {
  long bad = 0;
#pragma omp target teams distribute parallel for device(d) is_device_ptr(p) reduction(+ : bad)
  for (size_t i = 0; i < n; i++)
    bad += p[i] != value(i + shift);
  return bad;
}

int main(void) {
  int a = 4, b = 8, host = omp_get_initial_device();
  unsigned char *buf = malloc(N), *back = malloc(N);
  unsigned char *on_a = omp_target_alloc(N, a), *on_b = omp_target_alloc(N, b);
  if (!buf || !back || !on_a || !on_b) {
    printf("allocation failed\n");
    return 1;
  }
  for (size_t i = 0; i < N; i++)
    buf[i] = value(i);

  int up = omp_target_memcpy(on_a, buf, N, 0, 0, a, host);
  printf("to device: rc=%d differ=%ld\n", up, differ_on(a, on_a, N, 0));
  int across = omp_target_memcpy(on_b, on_a, N, 0, 0, b, a);
  printf("rank to rank: rc=%d differ=%ld\n", across, differ_on(b, on_b, N, 0));
  unsigned char *on_c = omp_target_alloc(N, a + 1);
  int within = on_c ? omp_target_memcpy(on_c, on_a, N, 0, 0, a + 1, a) : -1;
  printf("within a rank: rc=%d differ=%ld\n", within, on_c ? differ_on(a + 1, on_c, N, 0) : -1);
  omp_target_free(on_c, a + 1);
  memset(back, 0, N);
  int down = omp_target_memcpy(back, on_b, N, 0, 0, host, b);
  printf("from device: rc=%d differ=%d\n", down, memcmp(back, buf, N) != 0);

  // PART bytes from offset 7 of the program's buffer to the last PART bytes of on_a, then to
  // offset 11 of on_b (rank to rank), then back from there.
  size_t at = N - PART;
  int part_up = omp_target_memcpy(on_a, buf, PART, at, 7, a, host);
  int part_across = omp_target_memcpy(on_b, on_a, PART, 11, at, b, a);
  memset(back, 0, PART);
  int part_down = omp_target_memcpy(back, on_b, PART, 0, 11, host, b);
  printf("parts: rc=%d,%d,%d differ=%ld,%ld,%d\n", part_up, part_across, part_down,
         differ_on(a, on_a + at, PART, 7), differ_on(b, on_b + 11, PART, 7), memcmp(back, buf + 7, PART) != 0);

  // A mapped array: to the device, changed there, and back.
#pragma omp target device(a) map(tofrom : buf[0:N])
  for (size_t i = 0; i < N; i += 4096)
    buf[i] ^= 0xff;
  long changed = 0;
  for (size_t i = 0; i < N; i++)
    changed += buf[i] != (i % 4096 == 0 ? (unsigned char)(value(i) ^ 0xff) : value(i));
  printf("mapped: differ=%ld\n", changed);

  // A declare-target array: not an allocation of the device.
  for (size_t i = 0; i < G; i++)
    global[i] = value(i + 3);
#pragma omp target update to(global) device(a)
  long bad_global = 0;
#pragma omp target teams distribute parallel for device(a) reduction(+ : bad_global)
  for (size_t i = 0; i < G; i++) {
    bad_global += global[i] != value(i + 3);
    global[i] = value(i + 5);
  }
#pragma omp target update from(global) device(a)
  long bad_back = 0;
  for (size_t i = 0; i < G; i++)
    bad_back += global[i] != value(i + 5);
  printf("global: differ=%ld,%ld\n", bad_global, bad_back);

  omp_target_free(on_b, b);
  omp_target_free(on_a, a);
  free(back);
  free(buf);
  return 0;
}
