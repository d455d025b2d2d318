// Where a region runs under OMP_TARGET_OFFLOAD; and the device clause.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int on_host = -1, x = 1;
  #pragma omp target map(from : on_host) map(tofrom : x)
  {
    on_host = omp_is_initial_device();
    x += 1;
  }
  printf("on_host=%d x=%d\n", on_host, x);
  #pragma omp target device(omp_get_initial_device()) map(from : on_host)
  on_host = omp_is_initial_device();
  printf("initial device region on_host=%d\n", on_host);
  return 0;
}
