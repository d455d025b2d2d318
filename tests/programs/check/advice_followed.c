#include <stdio.h>
#define N 100000
static double a[N], r[N];

// advice.c with its advice followed: `a` goes to the device once (`to`, kept mapped across
// the steps), `r` is allocated once around the loop, and only the element the host reads
// comes back. Same output, far fewer bytes moved.
int main(void) {
  for (int i = 0; i < N; ++i) a[i] = i;
  double s = 0;
#pragma omp target enter data map(to: a[0:N]) map(alloc: r[0:N])
  for (int step = 0; step < 10; ++step) {
#pragma omp target
    for (int i = 0; i < N; ++i) r[i] = 2 * a[i];
#pragma omp target update from(r[N - 1:1])
    s += r[N - 1];
  }
#pragma omp target exit data map(release: a[0:N]) map(delete: r[0:N])
  printf("s=%.0f\n", s);
  return 0;
}
