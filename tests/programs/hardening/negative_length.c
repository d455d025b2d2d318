// Issue 12 item 7: a negative array-section length is an error at the construct (fatal
// under mandatory offloading), not an empty section.
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  int a[16] = {0};
  int n = argc > 1 ? atoi(argv[1]) : -4;
#pragma omp target map(tofrom : a[0:n])
  a[0] = 1;
  printf("not reached a[0]=%d\n", a[0]);
  return 0;
}
