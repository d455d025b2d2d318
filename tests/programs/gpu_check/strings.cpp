// std::string and iostreams in device code: the C++ library is not built for the GPU.
#include <iostream>
#include <string>

#pragma omp declare target
int label_length(int i) {
  std::string s = "item " + std::to_string(i);
  return (int)s.size();
}
#pragma omp end declare target

int main() {
  int n = 0;
#pragma omp target map(from : n)
  {
    n = label_length(42);
    std::cout << "on the device\n";
  }
  std::cout << n << "\n";
  return 0;
}
