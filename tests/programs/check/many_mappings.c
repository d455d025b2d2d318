#include <stdio.h>
#include <stdlib.h>
#define M 40000

// Correct: 40,000 arrays mapped at once, more guarded blocks than vm.max_map_count allows
// page protections for; a kernel then uses the last one.
int main(void) {
  double **p = malloc(M * sizeof *p);
  for (int m = 0; m < M; ++m) {
    p[m] = malloc(8 * sizeof(double));
    for (int i = 0; i < 8; ++i) p[m][i] = m;
    double *q = p[m];
#pragma omp target enter data map(to: q[0:8])
  }
  double *q = p[M - 1], s = 0;
#pragma omp target map(tofrom: s)
  for (int i = 0; i < 8; ++i) s += q[i];
  printf("%g\n", s);
  for (int m = 0; m < M; ++m) {
    double *r = p[m];
#pragma omp target exit data map(release: r[0:8])
    free(r);
  }
  free(p);
  return 0;
}
