// Calls exit() right after an offloaded region: the profile must still be complete JSON.
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  int x[256];
  for (int i = 0; i < 256; i++) x[i] = i;
  #pragma omp target map(tofrom : x)
  for (int i = 0; i < 256; i++) x[i] *= 2;
  printf("x[255]=%d\n", x[255]);
  fflush(stdout);
  exit(3);
}
