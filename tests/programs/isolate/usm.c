// Relies on unified shared memory: the kernel writes host memory through a plain pointer.
#include <stdio.h>
#include <stdlib.h>
#pragma omp requires unified_shared_memory

int main(void) {
  int *p = malloc(4 * sizeof *p);
#pragma omp target
  for (int i = 0; i < 4; i++) p[i] = i;
  printf("p[3]=%d\n", p[3]);
  free(p);
  return 0;
}
