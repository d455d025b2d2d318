#include <stdio.h>
#define N (1 << 20)
static double a[N];

// The kernel reads only the first half of `a` (8 MiB): the last 4 MiB go to the device for
// nothing, and mapping `a[0:524288]` leaves the result as it is (advice_part_followed.c).
int main(void) {
  for (int i = 0; i < N; ++i) a[i] = i % 7;
  double s = 0;
#pragma omp target map(to: a[0:1048576]) map(tofrom: s)
  for (int i = 0; i < N / 2; ++i) s += a[i];
  printf("s=%.1f\n", s);
  return 0;
}
