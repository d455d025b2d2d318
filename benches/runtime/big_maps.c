// Large mappings, `bars`-style: each host thread has two 64 MiB arrays and repeatedly enters
// them (`target enter data map(to:)`) and exits them (`target exit data map(from:)`), so
// every round moves 4 x 64 MiB between host and device. `memcpy` mode moves the same bytes
// with plain memcpy between buffers of the same size (the machine's memory speed, measured
// in the same run by scripts/bench-bigmaps.sh). One untimed round first in both modes: the
// figure is the steady state of a program that maps the same arrays again and again.
// Prints "<mode>_<threads>threads <GB/s>" (all threads together).
// usage: big_maps maps|memcpy THREADS ROUNDS
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BYTES ((size_t)64 << 20)

static char *filled(int value) {
  char *p = malloc(BYTES);
  if (!p) {
    fprintf(stderr, "big_maps: out of memory\n");
    exit(2);
  }
  memset(p, value, BYTES);
  return p;
}

// One round: both arrays to the device and back.
static void map_round(char *a, char *b) {
  #pragma omp target enter data map(to : a[0:BYTES], b[0:BYTES])
  #pragma omp target exit data map(from : a[0:BYTES], b[0:BYTES])
}

// The same bytes with memcpy: both arrays out to buffers of their own and back.
static void memcpy_round(char *a, char *b, char *da, char *db) {
  memcpy(da, a, BYTES);
  memcpy(db, b, BYTES);
  memcpy(a, da, BYTES);
  memcpy(b, db, BYTES);
}

int main(int argc, char **argv) {
  int copy = argc > 1 && strcmp(argv[1], "memcpy") == 0;
  int threads = argc > 2 ? atoi(argv[2]) : 1;
  int rounds = argc > 3 ? atoi(argv[3]) : 10;
  if (argc < 2 || (!copy && strcmp(argv[1], "maps") != 0) || threads < 1 || threads > 64 || rounds < 1) {
    fprintf(stderr, "usage: big_maps maps|memcpy THREADS(1..64) ROUNDS\n");
    return 2;
  }
  char *arrays[64][4];
  for (int t = 0; t < threads; t++)
    for (int i = 0; i < (copy ? 4 : 2); i++)
      arrays[t][i] = filled(t + 1);
  if (!copy) {
    #pragma omp target
    {}
  }
  double start = 0;
  #pragma omp parallel num_threads(threads)
  {
    char **mine = arrays[omp_get_thread_num()];
    for (int r = 0; r <= rounds; r++) {
      if (r == 1) {
        #pragma omp barrier
        #pragma omp single
        start = omp_get_wtime();
      }
      if (copy)
        memcpy_round(mine[0], mine[1], mine[2], mine[3]);
      else
        map_round(mine[0], mine[1]);
    }
  }
  double s = omp_get_wtime() - start;
  int bad = 0;
  for (int t = 0; t < threads; t++)
    bad += arrays[t][0][12345] != (char)(t + 1) || arrays[t][1][BYTES - 1] != (char)(t + 1);
  printf("%s_%dthreads %.3f\n", copy ? "memcpy" : "maps", threads, 4.0 * BYTES * rounds * threads / s / 1e9);
  return bad != 0;
}
