#include <stdio.h>
#define N 4096
static double b[N];

// The kernel doubles `b` and asks for it back (`tofrom`), but the enclosing `target data`
int main(void) { // maps it `to` only: the copy back never comes, the results stay behind.
  for (int i = 0; i < N; ++i) b[i] = 1;
#pragma omp target data map(to: b[0:N])
  {
#pragma omp target map(tofrom: b[0:N])
    for (int i = 0; i < N; ++i) b[i] *= 2;
  }
  printf("b[0]=%.0f\n", b[0]);
  return 0;
}
