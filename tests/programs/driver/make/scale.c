#include "work.h"

long device_scale(int n, int k) {
  long s = 0;
#pragma omp target teams distribute parallel for reduction(+ : s) map(tofrom : s)
  for (int i = 0; i < n; i++)
    s += (long)i * k;
  return s;
}
