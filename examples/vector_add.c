// A first offload program: add two vectors on device 0 and check the answer on the host.
#include <omp.h>
#include <stdio.h>

#define N (1 << 20)

int main(void) {
  static float a[N], b[N], c[N];
  for (int i = 0; i < N; i++) { a[i] = i; b[i] = 2.0f * i; }

  int on_host = 1;
  #pragma omp target teams distribute parallel for map(to : a, b) map(from : c)
  for (int i = 0; i < N; i++) c[i] = a[i] + b[i];
  #pragma omp target map(from : on_host)
  on_host = omp_is_initial_device();

  int bad = 0;
  for (int i = 0; i < N; i++) bad += c[i] != 3.0f * i;
  printf("vector_add: %d devices, ran on %s, %s\n", omp_get_num_devices(), on_host ? "the host" : "device 0",
         bad ? "WRONG" : "all results correct");
  return bad != 0;
}
