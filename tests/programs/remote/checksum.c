// Moves MiB mebibytes to the device and back `rounds` times, transformed on the device,
// and checks every byte: `checksum MiB seed rounds`. Prints one line per round.
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], 0, 10) : 16;
  uint64_t seed = argc > 2 ? strtoull(argv[2], 0, 10) : 1;
  int rounds = argc > 3 ? atoi(argv[3]) : 1;
  size_t n = mib * (1 << 20) / sizeof(uint64_t);
  uint64_t *a = malloc(n * sizeof *a);
  if (!a) return 2;
  for (int r = 0; r < rounds; r++) {
    for (size_t i = 0; i < n; i++) a[i] = (i * 2654435761u) ^ (seed + r);
    uint64_t host_sum = 0, dev_sum = 0;
    for (size_t i = 0; i < n; i++) host_sum += a[i];
#pragma omp target teams distribute parallel for map(tofrom : a[0:n]) reduction(+ : dev_sum)
    for (size_t i = 0; i < n; i++) {
      dev_sum += a[i];
      a[i] = a[i] * 3 + seed;
    }
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
      if (a[i] != (((i * 2654435761u) ^ (seed + r)) * 3 + seed)) bad++;
    printf("round %d seed=%llu device sum %s, %zu bad words\n", r, (unsigned long long)seed,
           dev_sum == host_sum ? "ok" : "WRONG", bad);
    fflush(stdout);
    if (bad || dev_sum != host_sum) return 1;
  }
  printf("checksum ok on device %d\n", omp_get_default_device());
  free(a);
  return 0;
}
