// Kernels of each execution mode and launch clause, for the CUDA plugin's tests
// (crates/e2e/tests/cuda_plugin.rs). With the fake driver kernels do not run: the data
// only travels to the device and back, so the sum stays the initial one.
#include <omp.h>
#include <stdio.h>

#define N 128

static int a[N];

int main(void) {
  for (int i = 0; i < N; i++)
    a[i] = i;
  printf("devices=%d\n", omp_get_num_devices());

  // A combined construct: SPMD, the trip count decides the teams.
#pragma omp target teams distribute parallel for map(tofrom : a[0 : N])
  for (int i = 0; i < N; i++)
    a[i] += 1;

  // Explicit teams and threads.
#pragma omp target teams distribute parallel for num_teams(7) thread_limit(96) map(tofrom : a[0 : N])
  for (int i = 0; i < N; i++)
    a[i] += 1;

  // A teams region with a thread limit and serial code around a parallel region: generic
  // (or generic-SPMD where the compiler managed to turn it into SPMD).
#pragma omp target teams num_teams(3) thread_limit(64) map(tofrom : a[0 : N])
  {
    if (omp_get_team_num() == 0)
      a[1] = 7;
#pragma omp parallel
    a[2] = omp_get_num_threads();
  }

  long sum = 0;
  for (int i = 0; i < N; i++)
    sum += a[i];
  printf("done sum=%ld\n", sum);
  return 0;
}
