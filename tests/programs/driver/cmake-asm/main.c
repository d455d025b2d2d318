#include <stdio.h>
int two(void);
int main(void) {
  int x = 0;
#pragma omp target map(tofrom: x)
  x = 40;
  printf("c+asm: %d\n", x + two());
  return 0;
}
