// Baselines for scripts/bench-isolate.sh: a bare request/reply round trip between two
// processes over a pipe pair (the mechanism an isolated device's control uses: its floor),
// and memcpy bandwidth between two buffers of MiB mebibytes (warm pages).
// `floor MiB round-trips`.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 1024;
  int trips = argc > 2 ? atoi(argv[2]) : 20000;
  int req[2], rep[2];
  if (pipe(req) || pipe(rep)) return 1;
  pid_t child = fork();
  if (child == 0) {
    char f[64];
    close(req[1]);
    close(rep[0]);
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
  waitpid(child, 0, 0);

  size_t bytes = mib << 20;
  char *a = malloc(bytes), *b = malloc(bytes);
  memset(a, 7, bytes);
  memset(b, 1, bytes);
  memcpy(b, a, bytes);
  double t1 = now();
  memcpy(b, a, bytes);
  double t2 = now();
  printf("pipe_round_trip_us=%.2f memcpy_MBps=%.1f check=%d\n", rt, bytes / (t2 - t1) / 1e6, b[bytes - 1]);
  free(a);
  free(b);
  return 0;
}
