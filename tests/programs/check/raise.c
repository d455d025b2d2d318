// A kernel raises SIGSEGV (SIGBUS with an argument): on a GPU the context is lost; on the
// isolated device, as on the host device, its construct ends and the device is lost.
#include <signal.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  int sig = argc > 1 && strcmp(argv[1], "bus") == 0 ? SIGBUS : SIGSEGV;
  printf("before\n");
  fflush(stdout);
#pragma omp target map(to: sig)
  raise(sig);
  printf("after\n");
  return 0;
}
