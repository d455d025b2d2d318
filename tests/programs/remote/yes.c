// Offloads once, then prints lines forever: piped into a reader that stops (`| head -1`),
// the program must end with SIGPIPE like any other, remote devices or not.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int x = 0;
#pragma omp target map(tofrom : x)
  x = 1;
  printf("offloaded %d, %d devices\n", x, omp_get_num_devices());
  fflush(stdout);
  for (unsigned long i = 0;; i++)
    printf("line %lu\n", i);
}
