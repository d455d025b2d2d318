// A kernel that reads a declare-target global the host set (3), adds 1 to it and prints it,
// then fails: `segv` (a host pointer: SIGSEGV), `fpe` (an integer division by zero: SIGFPE),
// `abort` (SIGABRT) or `exit` (exit(3)). The record of the failed launch holds the global as
// the failure left it, 4 (docs/replay.md); its replay restores 4, so the replayed kernel
// prints 5 (2 from the image's initial 1, 4 from the value before the launch).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma omp declare target
double scale = 1.0;
#pragma omp end declare target

int main(int argc, char **argv) {
  const char *how = argc > 1 ? argv[1] : "segv";
  int fail = !strcmp(how, "fpe") ? 1 : !strcmp(how, "abort") ? 2 : !strcmp(how, "exit") ? 3 : 0;
  double y[4] = {1, 2, 3, 4};
  double *host = malloc(1 << 20);  // never mapped
  host[0] = 0;
  scale = 3.0;
#pragma omp target update to(scale)
#pragma omp target map(tofrom: y) is_device_ptr(host)
  {
    scale += 1.0;
    printf("kernel: scale=%g\n", scale);
    fflush(NULL);
    for (int i = 0; i < 4; ++i) y[i] *= scale;
    if (fail == 1) {
      volatile int zero = (int)y[0] - (int)y[0];
      y[1] = 1 / zero;
    } else if (fail == 2) {
      abort();
    } else if (fail == 3) {
      exit(3);
    } else {
      host[0] = y[0];
    }
  }
  printf("y=%g %g %g %g\n", y[0], y[1], y[2], y[3]);
  free(host);
  return 0;
}
