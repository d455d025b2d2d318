// declare target globals: `to` globals bound to the device copy at load, `link` filled on map.
#include <omp.h>
#include <stdio.h>

int counter = 5;
double table[8] = {1, 2, 3, 4, 5, 6, 7, 8};
#pragma omp declare target to(counter, table)

int linked[4] = {10, 20, 30, 40};
#pragma omp declare target link(linked)

#pragma omp declare target
static int twice(int x) { return 2 * x; }
#pragma omp end declare target

int main(void) {
  int dev = omp_get_default_device();
  // The device copy starts from the image's initialiser; the host changes stay on the host.
  counter = 7;
  #pragma omp target map(from : counter)
  { counter = counter + 1; }
  printf("to global, map(from): counter=%d\n", counter);

  counter = 100;
  #pragma omp target update to(counter)
  #pragma omp target
  { counter = twice(counter); }
  #pragma omp target update from(counter)
  printf("to global, update: counter=%d\n", counter);

  #pragma omp target
  for (int i = 0; i < 8; i++) table[i] *= 10;
  printf("host table[7] before update=%.0f\n", table[7]);
  #pragma omp target update from(table)
  printf("host table[7] after update=%.0f\n", table[7]);
  printf("global present=%d\n", omp_target_is_present(&counter, dev));

  #pragma omp target map(tofrom : linked)
  for (int i = 0; i < 4; i++) linked[i] += 1;
  printf("link: %d %d %d %d\n", linked[0], linked[1], linked[2], linked[3]);
  return 0;
}
