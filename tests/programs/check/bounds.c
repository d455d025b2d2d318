#include <stdio.h>
#include <stdlib.h>
#define N 1024
// The loop runs one element too far: a[N] is outside the mapped section a[0:N]. (b lies
// below a on the host and right after it on the device: the finding must name a.)
int main(void) {
  double *b = calloc(N, sizeof *b), *a = malloc((N + 1) * sizeof *a);
#pragma omp target map(tofrom: a[0:N]) map(to: b[0:N])
  for (int i = 0; i <= N; ++i) a[i] = b[i % N] + i;
  printf("a[1]=%.0f\n", a[1]);
  free(a);
  free(b);
  return 0;
}
