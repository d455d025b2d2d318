#include <stdio.h>
#define N 4096
static double e[N];

// Every kernel writes all of `e`, mapped `from`; the host peeks at one element with a
// partial `target update from`. The copy back at the end is needed: no advice may call it
// "copied back although no kernel changed it" (the partial update covered 8 of its bytes).
int main(void) {
#pragma omp target data map(from: e[0:N])
  {
    for (int step = 0; step < 3; ++step) {
#pragma omp target
      for (int i = 0; i < N; ++i) e[i] = i + 1;
#pragma omp target update from(e[0:1])
      printf("step %d: e[0]=%.0f\n", step, e[0]);
    }
  }
  double s = 0;
  for (int i = 0; i < N; ++i) s += e[i];
  printf("s=%.0f\n", s);
  return 0;
}
