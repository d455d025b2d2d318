// The device's worker is killed (SIGKILL, from outside the worker: a thread of the program)
// while a long kernel runs on it: the construct fails at once naming the kernel and its
// location, instead of hanging.
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

// The program's children (the worker was started by one of its threads).
static int children(int *pids, int max) {
  int n = 0;
  DIR *tasks = opendir("/proc/self/task");
  struct dirent *t;
  while (tasks && (t = readdir(tasks))) {
    char path[128];
    snprintf(path, sizeof path, "/proc/self/task/%s/children", t->d_name);
    FILE *f = fopen(path, "r");
    while (f && n < max && fscanf(f, "%d", &pids[n]) == 1)
      n++;
    if (f)
      fclose(f);
  }
  if (tasks)
    closedir(tasks);
  return n;
}

static void *killer(void *arg) {
  (void)arg;
  usleep(300 * 1000);
  int pids[8];
  int n = children(pids, 8);
  for (int i = 0; i < n; i++)
    kill(pids[i], SIGKILL);
  return 0;
}

int main(void) {
  int x = 1;
#pragma omp target map(tofrom : x)
  x += 1;
  printf("first=%d\n", x);
  fflush(stdout);
  pthread_t t;
  pthread_create(&t, 0, killer, 0);
#pragma omp target map(tofrom : x)
  {
    for (int i = 0; i < 600; i++)
      usleep(100 * 1000);
    x = -1;
  }
  printf("after=%d\n", x);
  return 0;
}
