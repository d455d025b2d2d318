// Many small map/unmap cycles: enter and exit data of 64 arrays of 16..4096 bytes, repeated.
// Prints ns per map+unmap of one array. Run with LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=0 to
// see the cost without the memory manager.
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define ARRAYS 64

int main(int argc, char **argv) {
  long rounds = argc > 1 ? atol(argv[1]) : 20000;
  char *bufs[ARRAYS];
  size_t sizes[ARRAYS];
  for (int i = 0; i < ARRAYS; i++) {
    sizes[i] = 16u << (i % 9);  // 16 B .. 4 KiB
    bufs[i] = malloc(sizes[i]);
  }
  #pragma omp target
  {}
  double t0 = omp_get_wtime();
  for (long r = 0; r < rounds; r++) {
    for (int i = 0; i < ARRAYS; i++) {
      char *p = bufs[i];
      #pragma omp target enter data map(alloc : p[0:sizes[i]])
    }
    for (int i = 0; i < ARRAYS; i++) {
      char *p = bufs[i];
      #pragma omp target exit data map(release : p[0:sizes[i]])
    }
  }
  double ns = (omp_get_wtime() - t0) / ((double)rounds * ARRAYS) * 1e9;
  printf("small_map_unmap %.1f\n", ns);
  return 0;
}
