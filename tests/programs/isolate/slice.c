// The time slices of the threads that run a kernel: the kernel's first thread (on the
// isolated device, the worker thread that read the launch) and another thread of its team.
// Prints `first=<ns> other=<ns>` from /proc/thread-self/sched (`se.slice`, Linux 6.6+;
// -1 where it is not reported).
#include <omp.h>
#include <stdio.h>
#include <string.h>

#pragma omp declare target
static long slice_ns(void) {
  FILE *f = fopen("/proc/thread-self/sched", "r");
  char line[256];
  long ns = -1;
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "se.slice", 8) == 0) sscanf(strchr(line, ':') + 1, "%ld", &ns);
  if (f) fclose(f);
  return ns;
}
#pragma omp end declare target

int main(void) {
  long first = -2, other = -2;
#pragma omp target map(from: first, other)
  {
    first = slice_ns();
#pragma omp parallel num_threads(2)
    if (omp_get_thread_num() == 1) other = slice_ns();
  }
  printf("first=%ld other=%ld\n", first, other);
  return 0;
}
