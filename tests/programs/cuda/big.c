// Maps 64 MiB: more than the fake driver's memory when FAKE_CUDA_MEM_LIMIT is small.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define N (16 * 1024 * 1024)

int main(void) {
  float *v = calloc(N, sizeof *v);
  printf("devices=%d\n", omp_get_num_devices());
  fflush(stdout);
#pragma omp target teams distribute parallel for map(tofrom : v[0 : N])
  for (int i = 0; i < N; i++)
    v[i] += 1.0f;
  printf("done\n");
  free(v);
  return 0;
}
