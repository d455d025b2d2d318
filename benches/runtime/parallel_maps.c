// Host threads mapping their own 64 MiB arrays at once: each thread copies its array to the
// device and back, repeatedly. Prints the threads' combined bandwidth in GB/s. Shows whether
// one thread's transfer blocks the others' (a table lock held across copies would).
// usage: parallel_maps THREADS ROUNDS
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BYTES (64u << 20)

int main(int argc, char **argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  int rounds = argc > 2 ? atoi(argv[2]) : 8;
  if (threads < 1 || threads > 64 || rounds < 1) {
    fprintf(stderr, "usage: parallel_maps THREADS(1..64) ROUNDS\n");
    return 2;
  }
  char **bufs = malloc(sizeof(char *) * threads);
  for (int t = 0; t < threads; t++) {
    bufs[t] = malloc(BYTES);
    memset(bufs[t], t + 1, BYTES);
  }
  #pragma omp target
  {}
  double t0 = omp_get_wtime();
  #pragma omp parallel num_threads(threads)
  {
    char *p = bufs[omp_get_thread_num()];
    for (int r = 0; r < rounds; r++) {
      #pragma omp target enter data map(to : p[0:BYTES])
      #pragma omp target exit data map(from : p[0:BYTES])
    }
  }
  double s = omp_get_wtime() - t0;
  int bad = 0;
  for (int t = 0; t < threads; t++)
    bad += bufs[t][12345] != (char)(t + 1);
  printf("maps_%dthreads %.3f\n", threads, 2.0 * BYTES * rounds * threads / s / 1e9);
  return bad != 0;
}
