// Issue 12 item 9: one clear message per bad call.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int x = 0;
  printf("disassociate on device 99 rc=%d\n", omp_target_disassociate_ptr(&x, 99));
  printf("associate on device 99 rc=%d\n", omp_target_associate_ptr(&x, &x, sizeof x, 0, 99));
  return 0;
}
