// The CPU an idle program's isolated device uses, for scripts/bench-isolate.sh: a few empty
// launches (the worker is started and warm), then the program sleeps `seconds` and reports
// the CPU time its worker (the child process named offload-worker) and the program itself
// used meanwhile, as a percentage of one CPU. `idle seconds`.
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

// utime + stime of process `pid`, in clock ticks; -1 when it cannot be read.
static long cpu_ticks(int pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');  // the name may hold spaces; the fields follow its ')'
  unsigned long ut, st;
  if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2) return -1;
  return (long)(ut + st);
}

// The pid of this process's child named offload-worker, or 0.
static int worker_pid(void) {
  DIR *d = opendir("/proc");
  struct dirent *e;
  int found = 0;
  while (d && (e = readdir(d)) && !found) {
    int pid = atoi(e->d_name);
    char path[64], buf[512];
    if (pid <= 0) continue;
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) continue;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    int ppid;
    if (p && strstr(buf, "(offload-worker)") && sscanf(p + 2, "%*c %d", &ppid) == 1 && ppid == getpid()) found = pid;
  }
  if (d) closedir(d);
  return found;
}

static double self_cpu_s(void) {
  struct rusage r;
  getrusage(RUSAGE_SELF, &r);
  return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}

int main(int argc, char **argv) {
  int seconds = argc > 1 ? atoi(argv[1]) : 10;
  for (int i = 0; i < 100; i++) {
#pragma omp target
    {}
  }
  int pid = worker_pid();
  if (!pid) {
    fprintf(stderr, "idle: no offload-worker child (run with LIBOMPTARGET_ISOLATE=1)\n");
    return 1;
  }
  long hz = sysconf(_SC_CLK_TCK), w0 = cpu_ticks(pid);
  double s0 = self_cpu_s();
  sleep(seconds);
  long w1 = cpu_ticks(pid);
  double s1 = self_cpu_s();
  if (w0 < 0 || w1 < 0) return 1;
  printf("idle_worker_cpu_pct=%.3f idle_program_cpu_pct=%.3f\n", (w1 - w0) * 100.0 / hz / seconds,
         (s1 - s0) * 100.0 / seconds);
  return 0;
}
