// A kernel that keeps a 64 KiB array on its stack: it runs on the CPU devices, but a GPU
// thread has 1 KiB of stack by default. LIBOMPTARGET_CHECK=gpu says so, once per kernel.
// With an argument the array is in a parallel region's code, on every thread of the team.
#include <stdio.h>

#define N 8192

int main(int argc, char **argv) {
  int n = N - (argc > 2);
  double s = 0;
  for (int step = 0; step < 3; ++step) {
    if (argc > 1) {
#pragma omp target teams distribute parallel for reduction(+ : s) map(tofrom : s)
      for (int t = 0; t < 4; ++t) {
        double work[N];
        for (int i = 0; i < n; ++i) work[i] = i + t;
        for (int i = 0; i < n; ++i) s += work[(i * 7919L) % n];
      }
    } else {
#pragma omp target map(tofrom : s)
      {
        double work[N];
        for (int i = 0; i < n; ++i) work[i] = i;
        for (int i = 0; i < n; ++i) s += work[(i * 7919L) % n];
      }
    }
  }
  printf("s=%g\n", s);
  return 0;
}
