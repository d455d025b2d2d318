// Kernels that look like gpu_stack.c and gpu_heap.c but would run on a GPU as they are:
// small local arrays, small mallocs (each freed), and large arrays that are mapped rather
// than kept on the stack or allocated in device code. LIBOMPTARGET_CHECK=gpu says nothing.
#include <stdio.h>
#include <stdlib.h>

#define N (2 << 20)

int main(int argc, char **argv) {
  int n = 32 - (argc > 1);
  double *big = malloc(N * sizeof *big);
  for (long i = 0; i < N; ++i) big[i] = 1;
  double s = 0;
  long m = 0;
  for (int step = 0; step < 3; ++step) {
    // A small local array on each thread.
#pragma omp target teams distribute parallel for reduction(+ : s) map(tofrom : s)
    for (int t = 0; t < 64; ++t) {
      double few[32];
      for (int i = 0; i < n; ++i) few[i] = i + t;
      for (int i = 0; i < n; ++i) s += few[(i * 7) % n];
    }
    // A large array, mapped (16 MiB).
#pragma omp target teams distribute parallel for reduction(+ : s) map(to : big[0:N])
    for (long i = 0; i < N; ++i) s += big[i];
    // Small mallocs in device code, each freed: 1 MiB at a time at most.
#pragma omp target map(tofrom : m)
    for (int i = 0; i < 64; ++i) {
      char *p = malloc(16384 * (i % 64 + 1));
      if (p) {
        p[0] = 1;
        m += p[0];
        free(p);
      }
    }
  }
  printf("s=%g m=%ld\n", s, m);
  free(big);
  return 0;
}
