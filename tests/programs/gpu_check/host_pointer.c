// A host function's address, called on the device: fine on the CPU devices, not on a GPU.
#include <stdio.h>

#pragma omp declare target
double twice(double v) { return 2 * v; }
#pragma omp end declare target

int main(void) {
  double (*op)(double) = twice;
  double r = 0;
#pragma omp target map(from : r) firstprivate(op)
  r = op(21);
  printf("%g\n", r);
  return 0;
}
