// The kernel on the last device ends its device: `worker` kills the process it runs in (the
// rank's worker), `rank` kills the device rank itself (the worker's parent). Prints before.
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int rank = argc > 1 && strcmp(argv[1], "rank") == 0;
  int d = omp_get_num_devices() - 1, x = 1;
#pragma omp target device(d) map(tofrom : x)
  x = 2;
  printf("first=%d\n", x);
  fflush(stdout);
#pragma omp target device(d) map(tofrom : x) firstprivate(rank)
  {
    usleep(200000);
    kill(rank ? getppid() : getpid(), SIGKILL);
    usleep(5000000);
    x = 3;
  }
  printf("after=%d\n", x);
  return 0;
}
