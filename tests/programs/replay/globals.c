// A kernel that reads a declare-target global the host set before the launch: a replay
// restores the global from the record's .globals (docs/replay.md), so --verify passes only
// when the kernel sees scale = 3, not the image's initial 1.
#include <stdio.h>

#pragma omp declare target
double scale = 1.0;
#pragma omp end declare target

int main(void) {
  double y[4] = {1, 2, 3, 4};
  scale = 3.0;
#pragma omp target update to(scale)
#pragma omp target map(tofrom: y)
  for (int i = 0; i < 4; ++i)
    y[i] *= scale;
  printf("y=%.0f %.0f %.0f %.0f\n", y[0], y[1], y[2], y[3]);
  return 0;
}
