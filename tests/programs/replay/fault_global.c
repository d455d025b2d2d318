// A kernel that reads a declare-target global the host set (3), adds 1 to it and prints it,
// then fails: `segv` (a host pointer: SIGSEGV), `fpe` (an integer division by zero: SIGFPE),
// `ill` (a trap instruction: SIGILL), `abort` (SIGABRT) or `exit` (exit(3)). The record of the failed launch holds the global as
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
  int fail = !strcmp(how, "fpe")     ? 1
             : !strcmp(how, "abort") ? 2
             : !strcmp(how, "exit")  ? 3
             : !strcmp(how, "ill")   ? 4
                                     : 0;
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
      // In assembly: a division by zero in C is undefined, and the compiler drops it.
      __asm__ volatile("movl $1, %%eax\n\tcltd\n\txorl %%ecx, %%ecx\n\tidivl %%ecx" ::: "eax", "ecx", "edx");
    } else if (fail == 2) {
      abort();
    } else if (fail == 3) {
      exit(3);
    } else if (fail == 4) {
      __builtin_trap();
    } else {
      host[0] = y[0];
    }
  }
  printf("y=%g %g %g %g\n", y[0], y[1], y[2], y[3]);
  free(host);
  return 0;
}
