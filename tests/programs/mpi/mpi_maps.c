// Runs a target region on every device, then says whether an MPI library is mapped into
// the process (/proc/self/maps): a program not started under MPI must have none.
#include <omp.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  int sum = 0;
  for (int d = 0; d < omp_get_num_devices(); d++) {
#pragma omp target device(d) map(tofrom : sum)
    sum += 1;
  }
  FILE *maps = fopen("/proc/self/maps", "r");
  char line[4096];
  int libmpi = 0;
  while (maps && fgets(line, sizeof line, maps))
    if (strstr(line, "/libmpi")) // libmpi.so.40, libmpi.so.12, libmpich.so.12
      libmpi = 1;
  printf("devices=%d sum=%d libmpi=%s\n", omp_get_num_devices(), sum, libmpi ? "loaded" : "absent");
  return 0;
}
