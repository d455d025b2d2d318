// Several host threads launch target regions at once, each on its own data.
#include <omp.h>
#include <stdio.h>

#define T 8
#define N 10000

int main(void) {
  static long out[T];
  #pragma omp parallel num_threads(T)
  {
    int t = omp_get_thread_num();
    static long buf[T][N];
    for (int r = 0; r < 20; r++) {
      for (int i = 0; i < N; i++) buf[t][i] = i + t;
      long s = 0;
      #pragma omp target map(to : buf[t][0:N]) map(tofrom : s) device(t % omp_get_num_devices())
      for (int i = 0; i < N; i++) s += buf[t][i];
      out[t] += s;
    }
  }
  int ok = 1;
  for (int t = 0; t < T; t++) {
    long expect = 20L * ((long)N * (N - 1) / 2 + (long)N * t);
    if (out[t] != expect) { printf("thread %d: got %ld expected %ld\n", t, out[t], expect); ok = 0; }
  }
  printf("threads: %s\n", ok ? "all sums correct" : "WRONG");
  return 0;
}
