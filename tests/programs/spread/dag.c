// A tiled 1-D stencil as a DAG of `target nowait` tasks (docs/cluster.md, "Spreading"): tile w
// of step t reads tiles w-1, w, w+1 of step t-1 (`depend(in:)`) and writes its own
// (`depend(out:)`), all data in the task's own map clauses. Before it and after it, tasks that
// use data entered on the default device (`target enter data`), which goes along with them
// when they move:
// - chains of tasks that each update one of W arrays entered one by one, naming all of it,
//   while a long task keeps the default device busy;
// - tasks that read one entered table;
// - tasks that each update one column of an entered array while naming all of it, with no
//   `depend` between them (legal: they write disjoint columns): all must work on one copy of
//   it (a copy run elsewhere and copied back whole would undo the other columns), and a
//   blocking region at home that writes the last column meanwhile.
// Prints every tile's, array's and column's checksum; the output is the same wherever the
// tasks run.
// usage: dag [work]   (work: inner iterations per element, default 50)
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#define W 6
#define T 8
#define N 512
#define R 3

static double grid[2][W][N];
static double table[N];
static double cols[W + 1][N];
static double acc[W][N];
static double anchor[1], pin[1] = {0.5};

int main(int argc, char **argv) {
  int work = argc > 1 ? atoi(argv[1]) : 50;
  for (int w = 0; w < W; w++)
    for (int i = 0; i < N; i++)
      grid[0][w][i] = w * N + i;
  for (int i = 0; i < N; i++)
    table[i] = 0.25 * i;
  for (int w = 0; w <= W; w++)
    for (int i = 0; i < N; i++)
      cols[w][i] = (w + i) % 13;
  for (int w = 0; w < W; w++)
    for (int i = 0; i < N; i++)
      acc[w][i] = (3 * w + i) % 11;
#pragma omp target enter data map(to : table[0 : N], pin[0 : 1])
#pragma omp target enter data map(to : cols)
  for (int w = 0; w < W; w++) {
#pragma omp target enter data map(to : acc[w][0 : N])
  }
#pragma omp parallel
#pragma omp single
  {
    // A long task that stays on the default device (`present`), started before the chains:
    // entered data leaves only a device busier than the one it goes to.
#pragma omp target nowait map(present, to : pin[0 : 1]) map(tofrom : anchor[0 : 1])
    {
      double x = pin[0];
      for (long k = 0; k < 60000000; k++)
        x = x * 0.999999 + 1e-9 * (double)(k % 11);
      anchor[0] = x;
    }
    // (Until it is under way there; at once when there is no device.)
    int dev = omp_get_default_device();
    while (dev < omp_get_num_devices() && !omp_target_is_present(anchor, dev))
      ;
    // Chain w updates the entered acc[w], naming all of it.
    for (int r = 1; r <= R; r++) {
      for (int w = 0; w < W; w++) {
        double *a = acc[w];
        double *c = grid[0][w];
#pragma omp target nowait depend(inout : a[0]) depend(in : c[0]) map(tofrom : a[0 : N]) map(to : c[0 : N])  \
    firstprivate(r, work)
        for (int i = 0; i < N; i++) {
          double v = a[i] * 0.5 + r + c[i] * 1e-3;
          for (int k = 0; k < work; k++)
            v = v * 0.999 + 0.001 * (double)((i + k) % 5);
          a[i] = v;
        }
      }
    }
    for (int t = 1; t <= T; t++) {
      for (int w = 0; w < W; w++) {
        double *out = grid[t % 2][w];
        double *l = grid[(t - 1) % 2][w > 0 ? w - 1 : w];
        double *c = grid[(t - 1) % 2][w];
        double *r = grid[(t - 1) % 2][w < W - 1 ? w + 1 : w];
#pragma omp target nowait depend(in : l[0], c[0], r[0]) depend(out : out[0])                      \
    map(to : l[0 : N], c[0 : N], r[0 : N]) map(from : out[0 : N]) firstprivate(work)
        for (int i = 0; i < N; i++) {
          double v = (l[(i + N - 1) % N] + c[i] + r[(i + 1) % N]) / 3.0;
          for (int k = 0; k < work; k++)
            v = v * 0.999 + 0.001 * (double)((i + k) % 7);
          out[i] = v;
        }
      }
    }
    // These read the entered table.
    for (int w = 0; w < W; w++) {
      double *c = grid[T % 2][w];
#pragma omp target nowait depend(inout : c[0]) map(tofrom : c[0 : N]) map(to : table[0 : N])
      for (int i = 0; i < N; i++)
        c[i] += table[i];
    }
    // Each writes its own column of the entered `cols`, naming all of it.
    for (int r = 1; r <= R; r++) {
      for (int w = 0; w < W; w++) {
#pragma omp target nowait depend(inout : cols[w][0]) map(tofrom : cols) firstprivate(r, w)
        for (int i = 0; i < N; i++)
          cols[w][i] = cols[w][i] * 0.5 + r * w;
      }
    }
    // Meanwhile this thread updates the last column at home, blocking, with no depend: a
    // construct at home that touches `cols` while it is away waits for it to come home.
#pragma omp target map(tofrom : cols)
    for (int i = 0; i < N; i++)
      cols[W][i] = cols[W][i] * 2 + 1;
  }
#pragma omp target exit data map(release : table[0 : N], pin[0 : 1])
#pragma omp target exit data map(from : cols)
  for (int w = 0; w < W; w++) {
#pragma omp target exit data map(from : acc[w][0 : N])
  }
  for (int w = 0; w < W; w++) {
    double s = 0;
    for (int i = 0; i < N; i++)
      s += grid[T % 2][w][i] * (1 + i % 3);
    printf("tile %d: %.9e\n", w, s);
  }
  for (int w = 0; w <= W; w++) {
    double s = 0;
    for (int i = 0; i < N; i++)
      s += cols[w][i] * (1 + i % 5);
    printf("column %d: %.9e\n", w, s);
  }
  for (int w = 0; w < W; w++) {
    double s = 0;
    for (int i = 0; i < N; i++)
      s += acc[w][i] * (1 + i % 5);
    printf("array %d: %.9e\n", w, s);
  }
  printf("anchor: %.9e\n", anchor[0]);
  return 0;
}
