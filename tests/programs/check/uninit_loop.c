#include <stdio.h>
#define N 64
#define B 1024
static double c[N * B];

// Each iteration maps a new block of `c` `from` and the kernel adds to it: one bug, met 64
// times; the checker says it once and counts the other 63 at exit.
int main(void) {
  for (int i = 0; i < N * B; ++i) c[i] = 1;
  for (int k = 0; k < N; ++k) {
#pragma omp target map(from: c[k * B:B])
    for (int i = 0; i < B; ++i) c[k * B + i] += 1;
  }
  printf("c[0]=%.0f\n", c[0]);
  return 0;
}
