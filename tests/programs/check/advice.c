#include <stdio.h>
#define N 100000
static double a[N], r[N];

// Correct but wasteful: `a` goes to the device and back at every step although no kernel
// changes it, and `r` is allocated again at every step.
int main(void) {
  for (int i = 0; i < N; ++i) a[i] = i;
  double s = 0;
  for (int step = 0; step < 10; ++step) {
#pragma omp target map(tofrom: a[0:N]) map(from: r[0:N])
    for (int i = 0; i < N; ++i) r[i] = 2 * a[i];
    s += r[N - 1];
  }
  printf("s=%.0f\n", s);
  return 0;
}
