// A device rank's side ends while 64 MiB copies go from MPI rank 1 (device 4) to rank 2
// (device 8) one after another. Kernels tell the program the pids of rank 1's and rank 2's
// workers and of rank 2 itself; after 300 ms one of them is killed: `source` (rank 1's
// worker), `destination` (rank 2's worker) or `rank` (rank 2, the device rank).
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define BYTES (64u << 20)

int main(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "destination";
  int a = 4, b = 8, src_worker = 0, dst_worker = 0, dst_rank = 0;
  void *src = omp_target_alloc(BYTES, a), *dst = omp_target_alloc(BYTES, b);
  if (!src || !dst) {
    printf("omp_target_alloc failed\n");
    return 1;
  }
#pragma omp target device(a) map(from : src_worker)
  src_worker = getpid();
#pragma omp target device(b) map(from : dst_worker, dst_rank)
  {
    dst_worker = getpid();
    dst_rank = getppid();
  }
  int victim = strcmp(what, "source") == 0 ? src_worker : strcmp(what, "rank") == 0 ? dst_rank : dst_worker;
  printf("copying\n");
  fflush(stdout);
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) {
      usleep(300000);
      kill(victim, SIGKILL);
    } else {
      for (int i = 0; i < 1000; i++)
        if (omp_target_memcpy(dst, src, BYTES, 0, 0, b, a)) {
          printf("copy failed\n");
          break;
        }
    }
  }
  printf("after\n");
  return 0;
}
