#include <stdio.h>
#define R 4096
#define C 512

static double in[R * C], out[R * C];

// A stencil (16 MiB a grid) whose rows at the edges no kernel touches: the first and last
// rows of `in`, two rows at each end of `out`. Both arrays are read (and `out` written):
// no advice says to map either of them `alloc` or to leave part of them out.
int main(void) {
  for (int i = 0; i < R * C; ++i) {
    in[i] = i % 13;
    out[i] = -1;
  }
#pragma omp target map(to: in[0:R * C]) map(tofrom: out[0:R * C])
  for (int i = 2; i < R - 2; ++i)
    for (int j = 0; j < C; ++j)
      out[i * C + j] = (in[(i - 1) * C + j] + in[i * C + j] + in[(i + 1) * C + j]) / 3;
  double s = 0;
  for (int i = 0; i < R * C; ++i) s += out[i];
  printf("s=%.1f\n", s);
  return 0;
}
