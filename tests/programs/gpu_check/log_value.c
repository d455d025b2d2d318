// Runs on the CPU devices; on a GPU its device code would not link (fopen, strlen, abort).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#pragma omp declare target
void log_value(const char *name, double v) {
  FILE *f = fopen("values.log", "a");
  fprintf(f, "%s=%g (%zu)\n", name, v, strlen(name));
  fclose(f);
}
#pragma omp end declare target

int main(void) {
  double x[8];
  const char *name = "x0";
#pragma omp target map(from : x) map(to : name[:3])
  {
    for (int i = 0; i < 8; i++)
      x[i] = i * 0.5;
    log_value(name, x[0]);
    if (x[1] < 0)
      abort();
  }
  printf("%g\n", x[7]);
  return 0;
}
