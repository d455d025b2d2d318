// What the queries say about host memory, as on a discrete GPU when isolated.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int x = 0;
  printf("accessible=%d devices=%d\n", omp_target_is_accessible(&x, sizeof x, 0), omp_get_num_devices());
  return 0;
}
