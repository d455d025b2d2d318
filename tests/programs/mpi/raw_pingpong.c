// The floor for MPI devices (scripts/bench-mpi.sh): between ranks 0 and 1, a 48-byte request
// answered by a 9-byte reply, waited for (a) with blocking MPI (Open MPI busy-polls) and (b)
// with MPI_Test polled for 1 ms (keeping the CPU for the first 30 us, then yielding it between
// polls), then with sleeps doubling from 5 us to 1 ms (how the runtime waits); then 64 MiB of written data from rank 0 to rank 1 (best of 5, acknowledged),
// in one message and in 2 MiB messages. With 0 round trips (argv[1]), only the bandwidth.
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) { return MPI_Wtime(); }

static void wait_backoff(MPI_Request *r) {
  int done = 0;
  double start = now();
  long sleep_ns = 5000;
  while (MPI_Test(r, &done, MPI_STATUS_IGNORE), !done) {
    double waited = now() - start;
    if (waited < 30e-6) continue;
    if (waited < 1e-3) {
      sched_yield();
      continue;
    }
    struct timespec ts = {0, sleep_ns};
    nanosleep(&ts, 0);
    sleep_ns = sleep_ns * 2 > 1000000 ? 1000000 : sleep_ns * 2;
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, runs = argc > 1 ? atoi(argv[1]) : 2000;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char req[48] = {0}, rep[9] = {0};
  for (int mode = 0; mode < 2 && runs > 0; mode++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = now();
    for (int i = 0; i < runs + 100; i++) {
      if (i == 100)
        t = now();
      MPI_Request r;
      if (rank == 0) {
        MPI_Send(req, sizeof req, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
        MPI_Irecv(rep, sizeof rep, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &r);
      } else {
        MPI_Irecv(req, sizeof req, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &r);
      }
      if (mode == 0)
        MPI_Wait(&r, MPI_STATUS_IGNORE);
      else
        wait_backoff(&r);
      if (rank == 1)
        MPI_Send(rep, sizeof rep, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
    }
    t = now() - t;
    if (rank == 0)
      printf("round trip (%s): %.2f us\n", mode == 0 ? "blocking, busy-polling" : "poll, then sleep", 1e6 * t / runs);
  }
  size_t bytes = 64u << 20;
  char *buf = malloc(bytes);
  // Written first, as a program's data (and a device's) is: pages never written all read
  // the kernel's one zero page, which stays in cache, and MPI's single copy from them ran at
  // twice the speed of real data here.
  memset(buf, 7, bytes);
  double best = 1e9;
  for (int r = 0; r < 5; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = now();
    if (rank == 0) {
      MPI_Send(buf, (int)bytes, MPI_BYTE, 1, 3, MPI_COMM_WORLD);
      MPI_Recv(rep, 1, MPI_BYTE, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf, (int)bytes, MPI_BYTE, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(rep, 1, MPI_BYTE, 0, 4, MPI_COMM_WORLD);
    }
    t = now() - t;
    if (t < best)
      best = t;
  }
  if (rank == 0)
    printf("64 MiB rank to rank: %.2f GB/s\n", bytes / best / 1e9);
  // The same in 2 MiB messages, all posted at once (how MPI devices copy rank to rank).
  enum { PIECES = 32 };
  size_t piece = bytes / PIECES;
  MPI_Request reqs[PIECES];
  best = 1e9;
  for (int r = 0; r < 5; r++) {
    MPI_Barrier(MPI_COMM_WORLD);
    double t = now();
    for (int i = 0; i < PIECES; i++) {
      if (rank == 0)
        MPI_Isend(buf + i * piece, (int)piece, MPI_BYTE, 1, 5, MPI_COMM_WORLD, &reqs[i]);
      else
        MPI_Irecv(buf + i * piece, (int)piece, MPI_BYTE, 0, 5, MPI_COMM_WORLD, &reqs[i]);
    }
    MPI_Waitall(PIECES, reqs, MPI_STATUSES_IGNORE);
    if (rank == 0)
      MPI_Recv(rep, 1, MPI_BYTE, 1, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    else
      MPI_Send(rep, 1, MPI_BYTE, 0, 4, MPI_COMM_WORLD);
    t = now() - t;
    if (t < best)
      best = t;
  }
  if (rank == 0)
    printf("64 MiB rank to rank in 2 MiB messages: %.2f GB/s\n", bytes / best / 1e9);
  free(buf);
  MPI_Finalize();
  return 0;
}
