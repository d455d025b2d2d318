#include <stdio.h>
#define N 4096
static double b[N];

// The kernel doubles `b`, but `b` is mapped `to` only: the results stay on the device.
int main(void) {
  for (int i = 0; i < N; ++i) b[i] = 1;
#pragma omp target map(to: b[0:N])
  for (int i = 0; i < N; ++i) b[i] *= 2;
  printf("b[0]=%.0f\n", b[0]);
  return 0;
}
