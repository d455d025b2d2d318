// Issue 12 item 20: `interop init/use/destroy ... depend(...)` wait for the target tasks
// they depend on (OpenMP validation-suite style).
#include <omp.h>
#include <stdio.h>

#define N 1024

static int slow(int i) {
  volatile long s = 0;
  for (long k = 0; k < 200000; k++)
    s += k;
  return s > 0 ? i : -1;
}
#pragma omp declare target(slow)

int main(void) {
  static int A[N], B[N], C[N];
  int bad = 0;
  omp_interop_t obj = omp_interop_none;
#pragma omp target enter data map(to : A, B, C)
#pragma omp target nowait depend(inout : A) map(present, alloc : A)
  for (int i = 0; i < N; i++)
    A[i] = slow(i) + 1;
#pragma omp interop init(targetsync : obj) depend(inout : A)
#pragma omp target update from(A)
  for (int i = 0; i < N; i++)
    bad += A[i] != i + 1;
  printf("init waited: %s\n", bad ? "no" : "yes");
#pragma omp target nowait depend(inout : B) map(present, alloc : B)
  for (int i = 0; i < N; i++)
    B[i] = slow(i) + 2;
#pragma omp interop use(obj) depend(in : B)
#pragma omp target update from(B)
  bad = 0;
  for (int i = 0; i < N; i++)
    bad += B[i] != i + 2;
  printf("use waited: %s\n", bad ? "no" : "yes");
#pragma omp target nowait depend(inout : C) map(present, alloc : C)
  for (int i = 0; i < N; i++)
    C[i] = slow(i) + 3;
#pragma omp interop destroy(obj) depend(out : C)
#pragma omp target exit data map(from : C) map(release : A, B)
  bad = 0;
  for (int i = 0; i < N; i++)
    bad += C[i] != i + 3;
  printf("destroy waited: %s\n", bad ? "no" : "yes");
  return 0;
}
