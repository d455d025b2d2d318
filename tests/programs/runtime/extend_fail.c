// Mapping a section that extends an existing mapping is an error: the runtime must say so,
// with both ranges and the construct's location, and stop cleanly.
#include <stdio.h>

int main(void) {
  int a[100];
  #pragma omp target enter data map(to : a[0:50])
  fprintf(stderr, "mapped a[0:50]\n");
  #pragma omp target enter data map(to : a[0:100])
  printf("not reached\n");
  return 0;
}
