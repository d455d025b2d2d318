#include <stdio.h>
#define N 4096
static double c[N];

// `c` is mapped `from`: its device copy starts undefined, and the kernel adds to it.
int main(void) {
  for (int i = 0; i < N; ++i) c[i] = 1;
#pragma omp target map(from: c[0:N])
  for (int i = 0; i < N; ++i) c[i] += 1;
  printf("c[0]=%.0f\n", c[0]);
  return 0;
}
