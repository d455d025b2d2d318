// fork() inside target regions on an isolated device: the child is a copy of the device's
// worker process, not of the program. A child that ends with _exit works as on the host; one
// that returns from the region is ended (with a warning) and the region completes once;
// system() inside a region prints to the program's stdout.
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
  int status = -1;
#pragma omp target map(from : status)
  {
    pid_t p = fork();
    if (p == 0)
      _exit(7);
    int st = 0;
    waitpid(p, &st, 0);
    status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  }
  printf("child status=%d\n", status);
  fflush(stdout);
  int x = 0;
#pragma omp target map(tofrom : x)
  {
    pid_t p = fork();
    if (p > 0) {
      waitpid(p, 0, 0);
      x += 1;
    }
  }
  printf("x=%d\n", x);
  fflush(stdout);
  int rc = -1;
#pragma omp target map(from : rc)
  rc = system("echo from-system");
  printf("system=%d\n", rc);
  return 0;
}
