// A declare-target function with a local array of WORDS doubles (64 KiB by default): on the
// CPU devices it runs; a GPU thread's stack holds 1 KiB unless LIBOMPTARGET_STACK_SIZE says
// more. Built with -DWORDS=16 it fits.
#include <stdio.h>

#ifndef WORDS
#define WORDS 8192
#endif

static double smooth(const double *x, int n) {
  double tmp[WORDS];
  for (int i = 0; i < WORDS; i++)
    tmp[i] = x[i % n] * 0.5;
  double s = 0;
  for (int i = 0; i < WORDS; i++)
    s += tmp[i];
  return s;
}
#pragma omp declare target(smooth)

int main(void) {
  double x[16], s = 0;
  for (int i = 0; i < 16; i++)
    x[i] = i;
#pragma omp target map(to : x) map(from : s)
  s = smooth(x, 16);
  printf("%g\n", s);
  return 0;
}
