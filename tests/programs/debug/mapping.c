// A small mapping story for LIBOMPTARGET_DEBUG: an array entered, used by a target region
// (found mapped: its count goes 1 -> 2 -> 1), and exited with a copy back.
#include <stdio.h>

int main(void) {
  int a[256];
  for (int i = 0; i < 256; i++)
    a[i] = i;
#pragma omp target enter data map(to : a[0:256])
#pragma omp target map(tofrom : a[0:256])
  for (int i = 0; i < 256; i++)
    a[i] += 1;
#pragma omp target exit data map(from : a[0:256])
  printf("%d\n", a[255]);
  return 0;
}
