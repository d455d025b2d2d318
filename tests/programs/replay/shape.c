// A kernel with its own launch shape (num_teams, thread_limit, num_threads), which writes the
// shape it ran with: `omp-replay --teams/--threads` replace the clauses' values
// (docs/replay.md), so a replay with other numbers fails --verify at those bytes.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int shape[2] = {0, 0};
#pragma omp target teams num_teams(1) thread_limit(2) map(tofrom: shape)
  {
    if (omp_get_team_num() == 0) {
      shape[0] = omp_get_num_teams();
#pragma omp parallel num_threads(2)
      if (omp_get_thread_num() == 0)
        shape[1] = omp_get_num_threads();
    }
  }
  printf("teams=%d threads=%d\n", shape[0], shape[1]);
  return 0;
}
