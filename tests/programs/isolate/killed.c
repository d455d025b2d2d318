// Kills its own children (the isolated device's worker) between two target regions: the
// second must fail with an error, not hang.
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

static int kill_children(void) {
  int killed = 0;
  DIR *tasks = opendir("/proc/self/task");
  struct dirent *t;
  while (tasks && (t = readdir(tasks))) {
    char path[128];
    snprintf(path, sizeof path, "/proc/self/task/%s/children", t->d_name);
    FILE *f = fopen(path, "r");
    int pid;
    while (f && fscanf(f, "%d", &pid) == 1) killed += kill(pid, SIGKILL) == 0;
    if (f) fclose(f);
  }
  if (tasks) closedir(tasks);
  return killed;
}

int main(void) {
  int x = 1;
#pragma omp target map(tofrom : x)
  x += 1;
  printf("first=%d\n", x);
  fflush(stdout);
  printf("killed=%d\n", kill_children());
  fflush(stdout);
#pragma omp target map(tofrom : x)
  x += 1;
  printf("second=%d\n", x);
  return 0;
}
