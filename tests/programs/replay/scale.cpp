// A C++ kernel for LIBOMPTARGET_RECORD / omp-replay: a member function's target region.
#include <cstdio>
#include <vector>

struct Scale {
  double factor;
  void apply(double *v, int n) const {
#pragma omp target teams distribute parallel for map(tofrom: v[0:n])
    for (int i = 0; i < n; ++i)
      v[i] = v[i] * factor + i;
  }
};

int main() {
  std::vector<double> v(4096, 3.0);
  Scale s{1.5};
  s.apply(v.data(), static_cast<int>(v.size()));
  double sum = 0;
  for (double d : v)
    sum += d;
  std::printf("scale sum=%.1f\n", sum);
  return 0;
}
