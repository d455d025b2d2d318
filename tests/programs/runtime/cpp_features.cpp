// C++: classes, templates, lambdas captured into target regions, references.
#include <cstdio>
#include <vector>

template <typename T> T dot(const T *a, const T *b, int n) {
  T s = 0;
  #pragma omp target map(to : a[0:n], b[0:n]) map(tofrom : s)
  for (int i = 0; i < n; i++) s += a[i] * b[i];
  return s;
}

struct Particles {
  int n;
  double *x;
  void step(double dt) {
    double *px = x;
    int cnt = n;
    #pragma omp target map(tofrom : px[0:cnt])
    for (int i = 0; i < cnt; i++) px[i] += dt * i;
  }
};

int main() {
  std::vector<int> a(100), b(100);
  for (int i = 0; i < 100; i++) { a[i] = i; b[i] = 2; }
  std::printf("template dot=%d\n", dot(a.data(), b.data(), 100));

  std::vector<double> xs(10, 1.0);
  Particles p{10, xs.data()};
  p.step(0.5);
  std::printf("method: x[9]=%.1f\n", xs[9]);

  int factor = 3;
  int arr[5] = {1, 2, 3, 4, 5};
  auto scale = [&](int i) { arr[i] *= factor; };
  #pragma omp target map(tofrom : arr) map(to : factor)
  for (int i = 0; i < 5; i++) scale(i);
  std::printf("lambda: %d %d %d %d %d\n", arr[0], arr[1], arr[2], arr[3], arr[4]);

  int total = 0;
  int &ref = total;
  #pragma omp target map(tofrom : ref)
  for (int i = 1; i <= 10; i++) ref += i;
  std::printf("reference: total=%d\n", total);
  return 0;
}
