#include <stdio.h>
#define N (1 << 20)
static double a[N];

// advice_part.c with the advice followed: only the half of `a` the kernel reads is mapped.
int main(void) {
  for (int i = 0; i < N; ++i) a[i] = i % 7;
  double s = 0;
#pragma omp target map(to: a[0:524288]) map(tofrom: s)
  for (int i = 0; i < N / 2; ++i) s += a[i];
  printf("s=%.1f\n", s);
  return 0;
}
