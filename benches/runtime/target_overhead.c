// Runtime overhead per construct: an empty target region, a target region mapping 8 KiB
// tofrom, and a target region on 8 KiB that is already present. Prints ns per iteration.
// usage: target_overhead [iterations] [case]: with a case (empty, tofrom_8k, present_8k)
// only that loop runs, for instruction counts per case (scripts/bench-launch-cg.sh).
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BYTES 8192

static double now(void) { return omp_get_wtime(); }

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 200000;
  const char *only = argc > 2 ? argv[2] : NULL;
#define RUNS(c) (!only || strcmp(only, c) == 0)
  static char buf[BYTES];
  // Warm up: load the image on the device.
  #pragma omp target
  {}

  double t0 = now();
  for (long i = 0; RUNS("empty") && i < iters; i++) {
    #pragma omp target
    {}
  }
  double empty = (now() - t0) / iters * 1e9;

  t0 = now();
  for (long i = 0; RUNS("tofrom_8k") && i < iters; i++) {
    #pragma omp target map(tofrom : buf)
    { buf[0]++; }
  }
  double tofrom = (now() - t0) / iters * 1e9;

  #pragma omp target enter data map(to : buf)
  t0 = now();
  for (long i = 0; RUNS("present_8k") && i < iters; i++) {
    #pragma omp target map(tofrom : buf)
    { buf[1]++; }
  }
  double present = (now() - t0) / iters * 1e9;
  #pragma omp target exit data map(from : buf)

  printf("empty %.1f\ntofrom_8k %.1f\npresent_8k %.1f\n", empty, tofrom, present);
  return buf[0] == (char)iters ? 0 : 0;
}
