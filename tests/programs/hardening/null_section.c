// Issue 12 item 10: a NULL base with a non-zero section is an error naming the variable,
// not a segfault in the copy.
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  int *p = argc > 5 ? malloc(16) : NULL;
#pragma omp target map(to : p[0:4])
  {
    if (p)
      p[0] = 1;
  }
  printf("not reached\n");
  return 0;
}
