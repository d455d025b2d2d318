// One target region that maps an array both ways: an allocation, a copy in, a launch, a
// copy out and a delete, inside one region (tools see them with the region's target_data).
#include <stdio.h>

int main(void) {
  int a[4] = {1, 2, 3, 4};
#pragma omp target map(tofrom : a[0:4])
  for (int i = 0; i < 4; i++)
    a[i] *= 10;
  printf("%d %d %d %d\n", a[0], a[1], a[2], a[3]);
  return 0;
}
