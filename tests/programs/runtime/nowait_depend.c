// target nowait with depend: a chain of asynchronous regions ordered by dependences.
#include <stdio.h>

#define N 4096

int main(void) {
  static double a[N], b[N];
  for (int i = 0; i < N; i++) { a[i] = i; b[i] = 0; }
  #pragma omp parallel
  #pragma omp single
  {
    #pragma omp target map(tofrom : a) depend(out : a) nowait
    for (int i = 0; i < N; i++) a[i] += 1;
    #pragma omp target map(to : a) map(from : b) depend(in : a) depend(out : b) nowait
    for (int i = 0; i < N; i++) b[i] = 2 * a[i];
    #pragma omp target enter data map(to : a) depend(inout : b) nowait
    #pragma omp target map(tofrom : b) depend(inout : b) nowait
    for (int i = 0; i < N; i++) b[i] += 1;
    #pragma omp target exit data map(release : a) depend(inout : b) nowait
    #pragma omp taskwait
  }
  double s = 0;
  for (int i = 0; i < N; i++) s += b[i];
  printf("nowait chain: a[0]=%.0f b[0]=%.0f sum(b)=%.0f\n", a[0], b[0], s);
  return 0;
}
