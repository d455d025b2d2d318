// Each device computes on its own array, prints from its kernel, and the program checks
// the results: the device count and numbering under `mpirun -np 1 ./p : -np K offload-mpi-device`.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int n = omp_get_num_devices();
  printf("devices=%d\n", n);
  for (int d = 0; d < n; d++) {
    int a[64];
    for (int i = 0; i < 64; i++)
      a[i] = i;
    int initial = -1;
#pragma omp target device(d) map(tofrom : a, initial)
    {
      initial = omp_is_initial_device();
      for (int i = 0; i < 64; i++)
        a[i] = a[i] * 2 + d;
      printf("kernel on device %d\n", d);
    }
    long s = 0;
    for (int i = 0; i < 64; i++)
      s += a[i];
    printf("device %d: sum=%ld initial=%d\n", d, s, initial);
  }
  return 0;
}
