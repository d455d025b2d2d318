// Issue 12 items 6 and 26: what a program sees under OMP_TARGET_OFFLOAD=DISABLED.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int on_host = -1;
#pragma omp target map(from : on_host)
  on_host = omp_is_initial_device();
  printf("num_devices=%d initial_device=%d on_host=%d\n", omp_get_num_devices(), omp_get_initial_device(),
         on_host);
  int d = omp_get_default_device();
  on_host = -1;
#pragma omp target device(d) map(from : on_host)
  on_host = omp_is_initial_device();
  printf("default_device=%d on_host=%d\n", d, on_host);
  return 0;
}
