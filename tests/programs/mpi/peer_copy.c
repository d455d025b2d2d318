// Copies between MPI devices (docs/cluster.md, "Rank to rank"): device 4 is device 0 of MPI
// rank 1, device 5 its device 1, device 8 device 0 of rank 2. A pattern made on device 4 is
// copied to device 8 (rank to rank) and to device 5 (within rank 1) with omp_target_memcpy,
// and a block of it to device 8 with omp_target_memcpy_rect; kernels there count what
// differs. Only the counts travel through the program's rank.
#include <omp.h>
#include <stdio.h>

// Eleven pieces of a rank-to-rank copy (2 MiB each), the last one short.
#define N ((20 << 20) / 4 + 3)
#define ROWS 64
#define COLS 1024

static int value(long i) { return (int)(i * 7 + 1); }
#pragma omp declare target(value)

int main(void) {
  int a = 4, c = 5, b = 8, bad_b = -1, bad_c = -1, bad_rect = -1;
  int *src = omp_target_alloc(N * sizeof(int), a);
  int *on_b = omp_target_alloc(N * sizeof(int), b);
  int *on_c = omp_target_alloc(N * sizeof(int), c);
  int *rect = omp_target_alloc(ROWS * COLS * sizeof(int), b);
  if (!src || !on_b || !on_c || !rect) {
    printf("omp_target_alloc failed\n");
    return 1;
  }
#pragma omp target teams distribute parallel for device(a) is_device_ptr(src)
  for (long i = 0; i < N; i++)
    src[i] = value(i);
#pragma omp target teams distribute parallel for device(b) is_device_ptr(rect)
  for (long i = 0; i < ROWS * COLS; i++)
    rect[i] = 0;

  int to_b = omp_target_memcpy(on_b, src, N * sizeof(int), 0, 0, b, a);
  int to_c = omp_target_memcpy(on_c, src, N * sizeof(int), 0, 0, c, a);
  // src viewed as ROWS x COLS: rows 3-18, columns 5-104 go to rows 10-25, columns 20-119.
  size_t volume[2] = {16, 100}, dst_off[2] = {10, 20}, src_off[2] = {3, 5}, dims[2] = {ROWS, COLS};
  int to_rect = omp_target_memcpy_rect(rect, src, sizeof(int), 2, volume, dst_off, src_off, dims, dims, b, a);

#pragma omp target device(b) is_device_ptr(on_b, rect) map(from : bad_b, bad_rect)
  {
    bad_b = bad_rect = 0;
    for (long i = 0; i < N; i++)
      bad_b += on_b[i] != value(i);
    for (long r = 0; r < ROWS; r++)
      for (long k = 0; k < COLS; k++) {
        int inside = r >= 10 && r < 26 && k >= 20 && k < 120;
        int want = inside ? value((r - 7) * COLS + k - 15) : 0;
        bad_rect += rect[r * COLS + k] != want;
      }
  }
#pragma omp target device(c) is_device_ptr(on_c) map(from : bad_c)
  {
    bad_c = 0;
    for (long i = 0; i < N; i++)
      bad_c += on_c[i] != value(i);
  }
  printf("rank to rank: rc=%d differ=%d\n", to_b, bad_b);
  printf("within a rank: rc=%d differ=%d\n", to_c, bad_c);
  printf("rect rank to rank: rc=%d differ=%d\n", to_rect, bad_rect);
  omp_target_free(rect, b);
  omp_target_free(on_c, c);
  omp_target_free(on_b, b);
  omp_target_free(src, a);
  return 0;
}
