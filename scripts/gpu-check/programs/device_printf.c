// Device-side printf on a GPU (tests/programs/remote/kernel_printf.c also writes to stderr from
// the device, which LLVM 19's nvptx device runtime cannot link): kernels of one thread, a
// kernel per loop iteration with arguments of several types, and one line from each team.
#include <omp.h>
#include <stdio.h>

int main(void) {
  printf("host before\n");
  fflush(stdout);
#pragma omp target
  printf("kernel line 1\n");
  for (int i = 0; i < 3; i++) {
#pragma omp target firstprivate(i)
    printf("kernel %d of 3: %s %.1f %ld\n", i, "text", 2.5 * i, 1000000000000L + i);
  }
#pragma omp target teams num_teams(2) thread_limit(4)
  {
    if (omp_get_team_num() < 2)
      printf("team %d of %d\n", omp_get_team_num(), omp_get_num_teams());
  }
  printf("host after\n");
  return 0;
}
