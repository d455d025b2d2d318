// A kernel reads one element past a rank-3 section mapped `tofrom`: the fix keeps the map
// type (`to` would drop the results the kernel writes) and the section's three subscripts.
#include <stdio.h>

static double a[17][16][16];

int main(void) {
  int n = 16, m = 16, k = 16;
  double s = 0;
#pragma omp target map(tofrom: a[0:n][0:m][0:k]) map(tofrom: s)
  {
    for (int i = 0; i < n; ++i)
      for (int j = 0; j < m; ++j)
        for (int l = 0; l < k; ++l)
          a[i][j][l] += 1;
    s = a[n][0][0];
  }
  printf("s=%g\n", s);
  return 0;
}
