#include "work.h"

long device_sum(int n) {
  long s = 0;
#pragma omp target teams distribute parallel for reduction(+ : s) map(tofrom : s)
  for (int i = 0; i < n; i++)
    s += i;
  return s;
}
