#include <stdio.h>
#define N 4096
#define CHUNK 64
static double x[N], y[N], z[N], a[N * 8];

// Nothing here is allocated again and again: three different arrays are allocated once, by
// one `target enter data` executed once, and each of 512 distinct sections of `a` is mapped
// once. (Built without -g too: unnamed mappings must not be taken for one another.)
int main(void) {
  for (int i = 0; i < N; ++i) x[i] = y[i] = z[i] = i;
  for (int i = 0; i < N * 8; ++i) a[i] = 1;
#pragma omp target enter data map(to: x[0:N], y[0:N], z[0:N])
#pragma omp target
  for (int i = 0; i < N; ++i) z[i] = x[i] + y[i];
#pragma omp target exit data map(release: x[0:N], y[0:N]) map(from: z[0:N])
  for (int c = 0; c < N * 8 / CHUNK; ++c) {
#pragma omp target map(tofrom: a[c * CHUNK:CHUNK])
    for (int i = 0; i < CHUNK; ++i) a[c * CHUNK + i] += c;
  }
  double s = 0;
  for (int i = 0; i < N; ++i) s += z[i];
  for (int i = 0; i < N * 8; ++i) s += a[i];
  printf("s=%.0f\n", s);
  return 0;
}
