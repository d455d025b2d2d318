#include <cstddef>

double sum(double *A, std::size_t N) {
  double sum = 0.0;
#pragma omp target teams distribute parallel for reduction(+:sum)
  for (int i = 0; i < N; ++i)
    sum += A[i];

  return sum;
}

int main() {
  const std::size_t N = 1024;
  double A[N];
  sum(A, N);
}
