// Calls exec inside a target region: the device's worker process becomes another program
// (argv[1]: "sleep" keeps running, "true" ends at once). The construct must fail at once,
// naming the kernel and its location, and nothing may be left running.
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int sleeper = argc > 1 && strcmp(argv[1], "sleep") == 0;
  int x = 1;
#pragma omp target map(tofrom : x)
  x += 1;
  printf("first=%d\n", x);
  fflush(stdout);
#pragma omp target map(tofrom : x)
  {
    if (sleeper)
      execl("/bin/sleep", "sleep", "60", (char *)0);
    else
      execl("/bin/true", "true", (char *)0);
    x = -1;
  }
  printf("after=%d\n", x);
  return 0;
}
