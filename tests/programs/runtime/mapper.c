// declare mapper: a user-defined mapper maps the pointee of a struct member.
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  int len;
  int *buf;
} arr_t;

#pragma omp declare mapper(arr_t a) map(a, a.buf[0:a.len])

int main(void) {
  arr_t x;
  x.len = 100;
  x.buf = malloc(sizeof(int) * x.len);
  for (int i = 0; i < x.len; i++) x.buf[i] = i;

  #pragma omp target map(tofrom : x)
  for (int i = 0; i < x.len; i++) x.buf[i] = x.buf[i] * x.buf[i];

  long s = 0;
  for (int i = 0; i < x.len; i++) s += x.buf[i];
  printf("mapper target: sum of squares=%ld\n", s);

  // A data region through the mapper: the kernel inside finds the pointee present.
  #pragma omp target data map(tofrom : x)
  {
    #pragma omp target map(tofrom : x)
    for (int i = 0; i < x.len; i++) x.buf[i] = -x.buf[i];
  }
  printf("mapper data region: buf[3]=%d\n", x.buf[3]);
  free(x.buf);
  return 0;
}
