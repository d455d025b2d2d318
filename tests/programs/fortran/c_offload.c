/* A C program for the x86_64 offload target, linked with the Fortran device runtime: clang's
 * C codegen only calls libomp, so the runtime's overrides must not change any answer.
 * Expected: sum=<n(n+1)/2> initial=0 host_initial=1 team_ok=1 count=<n> */
#include <omp.h>
#include <stdio.h>

int main(void) {
  const int n = 100000;
  long long sum = 0;
  int count = 0, initial = -1, team_ok = 1;
#pragma omp target teams distribute parallel for reduction(+ : sum, count) map(tofrom : sum, count)
  for (int i = 1; i <= n; ++i) {
    sum += i;
    count += 1;
  }
#pragma omp target teams num_teams(2) map(tofrom : initial, team_ok)
  {
    /* Teams here are real libomp teams; the runtime's overrides must give libomp's answers. */
    if (omp_get_team_num() >= omp_get_num_teams()) team_ok = 0;
    if (omp_get_team_num() == 0) initial = omp_is_initial_device();
  }
  printf("sum=%lld initial=%d host_initial=%d team_ok=%d count=%d\n", sum, initial,
         omp_is_initial_device(), team_ok, count);
  return 0;
}
