// Issue 12 item 8: main returns while `target nowait` tasks are still running; the
// runtime's teardown must wait for them (or say plainly what happened), never report
// missing mappings for work it tore down underneath.
#include <stdio.h>
#include <unistd.h>

#define N 4096
static double a[N];

int main(void) {
  for (int i = 0; i < N; i++)
    a[i] = i;
#pragma omp target enter data map(to : a)
  for (int t = 0; t < 8; t++) {
#pragma omp target nowait map(present, alloc : a) firstprivate(t)
    {
      volatile double s = 0;
      for (long k = 0; k < 20000000; k++)
        s += k;
      a[t] = s > 0 ? t : -1;
    }
  }
  printf("main returns\n");
  fflush(stdout);
  return 0; // no taskwait: the tasks are still in flight
}
