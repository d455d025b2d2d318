// Two host threads offloading at once, many times: their LIBOMPTARGET_DEBUG lines must
// never interleave mid-line.
#include <omp.h>
#include <stdio.h>

int main(void) {
  long sums[2] = {0, 0};
#pragma omp parallel num_threads(2)
  {
    int t = omp_get_thread_num();
    int a[64];
    for (int r = 0; r < 50; r++) {
      for (int i = 0; i < 64; i++)
        a[i] = i + r;
#pragma omp target map(tofrom : a[0:64])
      for (int i = 0; i < 64; i++)
        a[i] *= 2;
      sums[t] += a[63];
    }
  }
  printf("%ld %ld\n", sums[0], sums[1]);
  return 0;
}
