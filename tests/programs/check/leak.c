#include <stdio.h>
#define N 4096
static double d[N];

// `d` is mapped with `enter data` and never unmapped.
int main(void) {
  for (int i = 0; i < N; ++i) d[i] = i;
#pragma omp target enter data map(to: d[0:N])
  double s = 0;
#pragma omp target map(tofrom: s)
  for (int i = 0; i < N; ++i) s += d[i];
  printf("s=%.0f\n", s);
  return 0;
}
