// One 2-second kernel on the last device: prints how much CPU the program's process used
// while it waited (getrusage, all threads), in percent of one core.
#include <omp.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <unistd.h>

static double cpu(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static double now(void) {
  struct timeval t;
  gettimeofday(&t, 0);
  return t.tv_sec + t.tv_usec / 1e6;
}

int main(void) {
  int d = omp_get_num_devices() - 1, x = 0;
#pragma omp target device(d) map(tofrom : x)
  x = 1;
  double c0 = cpu(), t0 = now();
#pragma omp target device(d) map(tofrom : x)
  {
    usleep(2000000);
    x += 1;
  }
  double c1 = cpu(), t1 = now();
  printf("x=%d\n", x);
  fprintf(stderr, "waited %.2f s, cpu %.1f%% of a core\n", t1 - t0, 100 * (c1 - c0) / (t1 - t0));
  return 0;
}
