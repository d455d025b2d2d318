// Correct: `x` is mapped `to` and used as device scratch (changed and checked on the
// device, never needed back); the host relies on its own copy being unchanged, as
// validation suites check.
#include <stdio.h>
#define N 1024

int main(void) {
  int x[N], errors = 0;
  for (int i = 0; i < N; ++i) x[i] = i;
#pragma omp target map(to: x[0:N]) map(tofrom: errors)
  {
    for (int i = 0; i < N; ++i) x[i] += 5;
    for (int i = 0; i < N; ++i) errors += x[i] != i + 5;
  }
  for (int i = 0; i < N; ++i) errors += x[i] != i;
  printf("errors=%d\n", errors);
  return errors;
}
