// Correct (written as validation suites write it): a firstprivate array and scalar on
// `target teams distribute`, every array mapped. The checker must stay silent, and the
// program print and end as it does without it.
#include <omp.h>
#include <stdio.h>
#define N 1024

int main(void) {
  int a[N], b[N], c[N], d[N], num_teams[N];
  int privatized_array[10], privatized = 0, errors = 0;
  for (int x = 0; x < N; ++x) {
    a[x] = 1;
    b[x] = x;
    c[x] = 2 * x;
    d[x] = 0;
    num_teams[x] = -1;
  }
  for (int x = 0; x < 10; ++x) privatized_array[x] = 0;
#pragma omp target data map(from: d[0:N]) map(to: a[0:N], b[0:N], c[0:N])
  {
#pragma omp target teams distribute firstprivate(privatized_array, privatized) \
    map(alloc: a[0:N], b[0:N], c[0:N], d[0:N]) num_teams(8)
    for (int x = 0; x < N; ++x) {
      num_teams[x] = omp_get_num_teams();
      for (int y = 0; y < a[x] + b[x]; ++y) {
        privatized++;
        for (int z = 0; z < 10; ++z) privatized_array[z]++;
      }
      d[x] = c[x] * privatized;
      for (int z = 0; z < 10; ++z) d[x] += privatized_array[z];
      privatized = 0;
      for (int z = 0; z < 10; ++z) privatized_array[z] = 0;
    }
  }
  for (int x = 0; x < N; ++x) errors += d[x] != 10 * (1 + x) + (1 + x) * 2 * x;
  printf("errors=%d teams>0=%d\n", errors, num_teams[0] > 0);
  return errors;
}
