// Baselines for scripts/bench-isolate.sh: a bare request/reply round trip between two
// processes over a pipe pair (the mechanism an isolated device's control uses: its floor),
// measured twice: as is, and with the answering process's thread given the short time slice
// the worker's serving threads take when LIBOMPTARGET_ISOLATE_SLICE_US asks for one
// (crates/worker/src/slice.rs; here 100 us when it is unset, 0 measures the plain one twice);
// and memcpy bandwidth between two buffers of MiB mebibytes (warm pages).
// `floor MiB round-trips`.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void full(int fd, char *b, size_t n, int rd) {
  while (n) {
    ssize_t k = rd ? read(fd, b, n) : write(fd, b, n);
    if (k <= 0) exit(1);
    b += k, n -= k;
  }
}

struct sched_attr {
  uint32_t size, sched_policy;
  uint64_t sched_flags;
  int32_t sched_nice;
  uint32_t sched_priority;
  uint64_t sched_runtime, sched_deadline, sched_period;
  uint32_t util_min, util_max;
};

// What the worker's serving threads do: a normal thread with a longer slice asks for `us`.
static void short_slice(unsigned us) {
  struct sched_attr a;
  memset(&a, 0, sizeof a);
  if (!us || syscall(SYS_sched_getattr, 0, &a, sizeof a, 0)) return;
  if (a.sched_policy != 0 || a.sched_runtime == 0 || a.sched_runtime <= us * 1000ull) return;
  a.size = sizeof a;
  a.sched_flags = 1; // reset on fork
  a.sched_runtime = us * 1000ull;
  syscall(SYS_sched_setattr, 0, &a, 0);
}

// Mean microseconds of `trips` round trips to a child whose thread has a slice of `slice_us`
// (0: the default).
static double round_trip(int trips, unsigned slice_us) {
  int req[2], rep[2];
  if (pipe(req) || pipe(rep)) exit(1);
  pid_t child = fork();
  if (child == 0) {
    char f[64];
    close(req[1]);
    close(rep[0]);
    short_slice(slice_us);
    // The worker's shape: a 4-byte length, then the frame (id, tag, payload).
    for (;;) {
      unsigned len;
      if (read(req[0], &len, 4) != 4) _exit(0);
      full(req[0], f, len, 1);
      unsigned rl = 9;
      memcpy(f, &rl, 4);
      full(rep[1], f, 13, 0);
    }
  }
  close(req[0]);
  close(rep[1]);
  char msg[64] = {0};
  unsigned len = 45; // a launch of an empty kernel: device, kernel, flags, teams, threads, 0 args
  memcpy(msg, &len, 4);
  for (int i = 0; i < 1000; i++) full(req[1], msg, 4 + len, 0), full(rep[0], msg + 4, 13, 1);
  double t0 = now();
  for (int i = 0; i < trips; i++) full(req[1], msg, 4 + len, 0), full(rep[0], msg + 4, 13, 1);
  double rt = (now() - t0) / trips * 1e6;
  close(req[1]);
  close(rep[0]);
  waitpid(child, 0, 0);
  return rt;
}

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 1024;
  int trips = argc > 2 ? atoi(argv[2]) : 20000;
  const char *env = getenv("LIBOMPTARGET_ISOLATE_SLICE_US");
  char *end = 0;
  unsigned long slice_us = env ? strtoul(env, &end, 10) : 100;
  if (!env || end == env) slice_us = 100; // unset or not a number: the worker's default
  if (slice_us && slice_us < 100) slice_us = 100;
  if (slice_us > 100000) slice_us = 100000;
  double rt = round_trip(trips, 0);
  double rt_slice = round_trip(trips, slice_us);

  size_t bytes = mib << 20;
  char *a = malloc(bytes), *b = malloc(bytes);
  memset(a, 7, bytes);
  memset(b, 1, bytes);
  memcpy(b, a, bytes);
  double t1 = now();
  memcpy(b, a, bytes);
  double t2 = now();
  printf("pipe_round_trip_us=%.2f pipe_round_trip_slice_us=%.2f memcpy_MBps=%.1f check=%d\n", rt, rt_slice,
         bytes / (t2 - t1) / 1e6, b[bytes - 1]);
  free(a);
  free(b);
  return 0;
}
