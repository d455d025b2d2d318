// Issue 12 item 22: `target update to(...)` of strided sections. A local array's strided
// section (passed as descriptors) updates exactly the elements it names; a pointer
// member's strided section, whose stride clang 19 drops and clang 22 passes unreadably, is
// refused with a message instead of overwriting the skipped elements or crashing.
#include <stdio.h>
#include <stdlib.h>

#define N 1024

typedef struct {
  size_t len;
  double *data;
} vec_t;
#pragma omp declare mapper(vec_t v) map(v, v.data[0:v.len])

int main(int argc, char **argv) {
  if (argc > 1) { // the pointer member, through the mapper
    vec_t s = {N, calloc(N, sizeof(double))};
#pragma omp target data map(tofrom : s)
    {
      for (size_t i = 0; i < N; i++)
        s.data[i] = i;
#pragma omp target update to(s.data[0:s.len / 2:2])
#pragma omp target
      for (size_t i = 0; i < N; i++)
        s.data[i] += 1000;
    }
    int wrong = 0;
    for (size_t i = 0; i < N; i++)
      wrong += s.data[i] != (i % 2 ? 1000 : i + 1000);
    printf("not reached: member section, %d wrong\n", wrong);
    return 0;
  }
  static double a[N];
#pragma omp target data map(tofrom : a)
  {
    for (int i = 0; i < N; i++)
      a[i] = i;
#pragma omp target update to(a[0:N/2:2])
#pragma omp target
    for (int i = 0; i < N; i++)
      a[i] += 1000;
  }
  int wrong = 0;
  for (int i = 0; i < N; i++)
    wrong += a[i] != (i % 2 ? 1000 : i + 1000);
  printf("array section: %d wrong\n", wrong);
  return 0;
}
