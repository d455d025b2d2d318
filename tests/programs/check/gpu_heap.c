// A kernel that allocates 100 MiB with malloc in device code: it runs on the CPU devices,
// but a GPU's device malloc heap is 8 MiB by default. LIBOMPTARGET_CHECK=gpu says so, once
// per kernel.
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  size_t bytes = (size_t)100 << 20;
  long s = 0;
  for (int step = 0; step < 3; ++step) {
#pragma omp target map(tofrom : s) firstprivate(bytes)
    {
      char *p = malloc(bytes);
      if (p) {
        for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
        for (size_t i = 0; i < bytes; i += 4096) s += p[i];
        free(p);
      }
    }
  }
  printf("s=%ld\n", s);
  return 0;
}
