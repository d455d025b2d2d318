// Two target regions: the first one's launch faults under the fake driver
// (FAKE_CUDA_FAIL_LAUNCH=1), the second must then never reach the lost device.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int x = 1;
  printf("devices=%d\n", omp_get_num_devices());
  fflush(stdout);
#pragma omp target map(tofrom : x)
  x += 1;
  printf("after first x=%d\n", x);
  fflush(stdout);
#pragma omp target map(tofrom : x)
  x += 1;
  printf("after second x=%d\n", x);
  return 0;
}
