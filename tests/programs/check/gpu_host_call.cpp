// A kernel that builds a std::string when asked (any argument): std::string's code is the C++
// library's, which no GPU has (its storage's operator new and delete are not findings: clang's
// OpenMP device headers define them). The host's own std::cout is no kernel's business:
// without the argument nothing is said.
#include <iostream>
#include <string>

int main(int argc, char **argv) {
  int verbose = argc > 1;
  long n = 0;
#pragma omp target map(tofrom : n) firstprivate(verbose)
  {
    n = 1;
    if (verbose) {
      std::string s(40, 'x');
      n = static_cast<long>(s.size());
    }
  }
  std::cout << "n=" << n << std::endl;
  return 0;
}
