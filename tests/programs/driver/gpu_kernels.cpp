// GPU fat-binary test in C++: a template kernel instantiated twice, a declare-target class
// method and global, and the C++ standard headers on the device side.
#include <cstdio>
#include <omp.h>
#include <vector>

#pragma omp declare target
struct Scaler {
  int k;
  int apply(int x) const { return k * x; }
};
Scaler g_scaler{5};
#pragma omp end declare target

template <typename T> T sum_on_device(const T *p, int n) {
  T s = 0;
#pragma omp target teams distribute parallel for reduction(+ : s) map(to : p[0:n])
  for (int i = 0; i < n; ++i)
    s += p[i] + g_scaler.apply(1);
  return s;
}

int main() {
  std::vector<double> d(100, 1.5);
  std::vector<int> v(100, 2);
  double sd = sum_on_device(d.data(), 100);
  int si = sum_on_device(v.data(), 100);
  std::printf("gpu_kernels_cpp sd=%.1f si=%d\n", sd, si);
  return sd == 650.0 && si == 700 ? 0 : 1;
}
