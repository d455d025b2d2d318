// The spreading benchmark (scripts/bench-spread.sh): an unmodified task-parallel program, a
// tiled 1-D stencil as a Task-Bench-like DAG. Tile w of step t reads tiles w-1, w, w+1 of
// step t-1 and writes its own; each is one `target nowait depend(…) map(…)` task that names
// no device, so LIBOMPTARGET_SPREAD=1 may place it on any device of the default device's
// kind. Prints the DAG's wall time and a checksum (the same wherever the tasks ran).
// usage: stencil [tiles] [steps] [work]   (work: inner iterations per element)
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define N 2048

int main(int argc, char **argv) {
  int tiles = argc > 1 ? atoi(argv[1]) : 8;
  int steps = argc > 2 ? atoi(argv[2]) : 10;
  int work = argc > 3 ? atoi(argv[3]) : 4000;
  double *grid = malloc(sizeof(double) * 2 * tiles * N);
  for (int i = 0; i < 2 * tiles * N; i++)
    grid[i] = i % 101;
  // Every device loads the image before the clock starts (a first launch loads it).
  int devices = omp_get_num_devices();
  for (int d = 0; d < devices; d++) {
#pragma omp target device(d)
    ;
  }
  double start = omp_get_wtime();
#pragma omp parallel
#pragma omp single
  for (int t = 1; t <= steps; t++) {
    for (int w = 0; w < tiles; w++) {
      double *out = grid + ((t % 2) * tiles + w) * N;
      double *in = grid + (((t - 1) % 2) * tiles) * N;
      double *l = in + (w > 0 ? w - 1 : w) * N, *c = in + w * N, *r = in + (w < tiles - 1 ? w + 1 : w) * N;
#pragma omp target nowait depend(in : l[0], c[0], r[0]) depend(out : out[0])                      \
    map(to : l[0 : N], c[0 : N], r[0 : N]) map(from : out[0 : N]) firstprivate(work)
      for (int i = 0; i < N; i++) {
        double v = (l[(i + N - 1) % N] + c[i] + r[(i + 1) % N]) / 3.0;
        for (int k = 0; k < work; k++)
          v = v * 0.9999 + 0.0001 * (double)((i + k) & 7);
        out[i] = v;
      }
    }
  }
  double took = omp_get_wtime() - start;
  double sum = 0;
  for (int i = 0; i < tiles * N; i++)
    sum += grid[(steps % 2) * tiles * N + i] * (1 + i % 3);
  printf("time %.3f s checksum %.9e\n", took, sum);
  free(grid);
  return 0;
}
