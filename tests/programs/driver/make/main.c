#include <stdio.h>
#include "work.h"

int main(void) {
  printf("make project: sum=%ld scaled=%ld\n", device_sum(1000), device_scale(100, 3));
  return 0;
}
