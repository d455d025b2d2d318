#include <stdio.h>
#include <stdlib.h>
#define N 1024

// The loop runs one element too far: a[N] is outside the mapped section a[0:N].
int main(void) {
  double *a = malloc((N + 1) * sizeof *a);
#pragma omp target map(tofrom: a[0:N])
  for (int i = 0; i <= N; ++i) a[i] = i;
  printf("a[1]=%.0f\n", a[1]);
  free(a);
  return 0;
}
