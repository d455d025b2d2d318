#include <stdio.h>
#include <stdlib.h>
#define BYTES (300L << 20)
#define PAGE 4096L

// Correct: a kernel writes one double in every other page of a 300 MiB `from` mapping
// (38,400 scattered pages: watched one by one they would split device memory into more
// regions than vm.max_map_count allows). With an argument, a later kernel also reads an
// array nothing wrote: that finding must still be made.
int main(int argc, char **argv) {
  long n = BYTES / sizeof(double), stride = 2 * PAGE / sizeof(double);
  double *a = malloc(BYTES);
  int *u = malloc(1024 * sizeof *u);
  long s = 0;
#pragma omp target map(from: a[0:n])
  for (long i = 0; i < n; i += stride) a[i] = i;
  for (long i = 0; i < n; i += stride) s += (long)a[i] / stride;
  printf("%ld\n", s);
  if (argc > 1) {
    long t = 0;
#pragma omp target map(alloc: u[0:1024]) map(tofrom: t)
    for (int i = 0; i < 1024; ++i) t += u[i] != 0;
    printf("%d\n", t >= 0);
  }
  free(a);
  free(u);
  return 0;
}
