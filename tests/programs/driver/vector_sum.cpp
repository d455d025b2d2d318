// C++ offload test: std::vector data mapped by pointer, a reduction, and a device check.
#include <cstdio>
#include <omp.h>
#include <vector>

int main() {
  std::vector<double> x(1000, 1.5);
  double *p = x.data();
  double s = 0;
#pragma omp target teams distribute parallel for reduction(+ : s) map(to : p[0:1000])
  for (int i = 0; i < 1000; ++i)
    s += p[i] * 2;
  int dev = -1;
#pragma omp target map(from : dev)
  dev = !omp_is_initial_device();
  std::printf("vector_sum s=%.1f on_device=%d\n", s, dev);
}
