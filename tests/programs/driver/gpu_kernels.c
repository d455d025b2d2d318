// GPU fat-binary test: two kernels, a declare-target function and two declare-target globals
// (a scalar and an array), built for amdgcn and compared with clang's own driver.
#include <omp.h>
#include <stdio.h>

#pragma omp declare target
int scale = 3;
double table[4] = {1.0, 2.0, 3.0, 4.0};
static int twice(int x) { return 2 * x; }
#pragma omp end declare target

int main(void) {
  int a[256];
#pragma omp target teams distribute parallel for map(from : a)
  for (int i = 0; i < 256; i++)
    a[i] = twice(i) * scale;
  double s = 0;
#pragma omp target map(tofrom : s)
  for (int i = 0; i < 4; i++)
    s += table[i];
  long sum = 0;
  for (int i = 0; i < 256; i++)
    sum += a[i];
  printf("gpu_kernels sum=%ld s=%.1f\n", sum, s);
  return sum == 195840 && s == 10.0 ? 0 : 1;
}
