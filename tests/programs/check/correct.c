#include <stdio.h>
#include <stdlib.h>
#define N 5000

// Correct mappings the checker must stay silent about: host changes that are updated,
// device results copied back, scratch buffers, kernels that only overwrite data whose
// host copy changed, partial updates, pointer members attached, reused mappings, results
// deleted on purpose.
struct vec { int n; double *v; };

int main(void) {
  double *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *tmp = malloc(N * sizeof *tmp);
  double s = 0;
  for (int i = 0; i < N; ++i) { a[i] = i; b[i] = 0; }
#pragma omp target enter data map(to: a[0:N]) map(alloc: b[0:N])
  for (int i = 0; i < N; ++i) a[i] = 2 * i;
#pragma omp target update to(a[0:N])
#pragma omp target map(alloc: tmp[0:N])
  for (int i = 0; i < N; ++i) { tmp[i] = a[i]; b[i] = tmp[i] + 1; }
#pragma omp target update from(b[0:N])
  // The host changes `a`, and a kernel overwrites it without reading it.
  for (int i = 0; i < N; ++i) a[i] = -1;
#pragma omp target
  for (int i = 0; i < N; ++i) a[i] = 3;
#pragma omp target exit data map(from: a[0:N]) map(release: b[0:N])
  // A partial update of a mapping.
#pragma omp target data map(tofrom: b[0:N])
  {
    b[10] = 100;
#pragma omp target update to(b[10:1])
#pragma omp target map(tofrom: s)
    for (int i = 0; i < N; ++i) s += b[i];
  }
  // A struct with a pointer member.
  struct vec v = { N, a };
#pragma omp target map(to: v) map(tofrom: v.v[0:N])
  for (int i = 0; i < v.n; ++i) v.v[i] += 1;
  // `always` copies, nested reuse, a firstprivate scalar.
  int k = 7;
#pragma omp target data map(tofrom: a[0:N])
  {
    a[0] = 42;
#pragma omp target map(always, to: a[0:N]) firstprivate(k)
    for (int i = 0; i < N; ++i) a[i] += k;
  }
  // Device results thrown away on purpose: `delete`.
#pragma omp target enter data map(to: tmp[0:N])
#pragma omp target
  for (int i = 0; i < N; ++i) tmp[i] *= 2;
#pragma omp target exit data map(delete: tmp[0:N])
  printf("a[0]=%.0f a[1]=%.0f b[10]=%.0f s=%.0f\n", a[0], a[1], b[10], s);
  free(a); free(b); free(tmp);
  return 0;
}
