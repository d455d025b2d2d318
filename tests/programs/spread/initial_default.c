// The initial device (-1, omp_initial_device) as the default device, and a nowait region
// with no device clause: spreading must take it the way it goes without spreading (the
// runtime has no device -1: it says so, with or without spreading).
#include <omp.h>
#include <stdio.h>

int main(void) {
  int x[4] = {1, 2, 3, 4};
  omp_set_default_device(-1);
  #pragma omp target nowait map(tofrom : x)
  for (int i = 0; i < 4; i++)
    x[i] *= 2;
  #pragma omp taskwait
  printf("%d %d %d %d\n", x[0], x[1], x[2], x[3]);
  return 0;
}
