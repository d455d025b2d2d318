// Keeps MiB mebibytes mapped and sends them to the device `rounds` times in a row:
// `transfer_loop MiB rounds`. Prints "mapped" once the data is on the device, so a test
// can kill this program, or its server, in the middle of a transfer.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 64;
  long rounds = argc > 2 ? atol(argv[2]) : 1000;
  size_t n = mib << 20;
  char *a = malloc(n);
  memset(a, 1, n);
#pragma omp target enter data map(to : a[0:n])
  printf("mapped\n");
  fflush(stdout);
  for (long r = 0; r < rounds; r++) {
    a[r % n] = (char)r;
#pragma omp target update to(a[0:n])
  }
#pragma omp target exit data map(delete : a[0:n])
  printf("done\n");
  return 0;
}
