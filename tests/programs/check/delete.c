// Correct: `a` is device scratch the program deletes on purpose once its results went back
// through another mapping (`r`). An explicit `delete` is intent, not discarded results.
#include <stdio.h>
#define N 4096
static double a[N], r[N];

int main(void) {
  for (int i = 0; i < N; ++i) a[i] = i;
#pragma omp target enter data map(to: a[0:N])
#pragma omp target map(from: r[0:N])
  for (int i = 0; i < N; ++i) {
    a[i] = 2 * a[i];
    r[i] = a[i] + 1;
  }
#pragma omp target exit data map(delete: a[0:N])
  printf("r[10]=%.0f a[10]=%.0f\n", r[10], a[10]);
  return r[10] == 21 && a[10] == 10 ? 0 : 1;
}
