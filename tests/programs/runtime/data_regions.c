// target data / enter / exit / update, map-type modifiers and reference counting.
#include <omp.h>
#include <stdio.h>

#define N 1000

int main(void) {
  int a[N], b[N];
  for (int i = 0; i < N; i++) { a[i] = i; b[i] = 0; }

  // Structured data region: `a` stays on the device across two kernels.
  #pragma omp target data map(to : a[0:N]) map(from : b[0:N])
  {
    #pragma omp target
    for (int i = 0; i < N; i++) a[i] *= 2;
    #pragma omp target
    for (int i = 0; i < N; i++) b[i] = a[i] + 1;
  }
  long s = 0;
  for (int i = 0; i < N; i++) s += b[i];
  printf("data region: sum(b)=%ld a[10]=%d (host copy unchanged)\n", s, a[10]);

  // Unstructured: enter, update from, update to, exit.
  int c[N];
  for (int i = 0; i < N; i++) c[i] = 1;
  #pragma omp target enter data map(to : c[0:N])
  printf("present after enter: %d\n", omp_target_is_present(c, omp_get_default_device()));
  #pragma omp target
  for (int i = 0; i < N; i++) c[i] += 1;
  printf("before update from: c[0]=%d\n", c[0]);
  #pragma omp target update from(c[0:N])
  printf("after update from: c[0]=%d\n", c[0]);
  for (int i = 0; i < N; i++) c[i] = 100;
  #pragma omp target update to(c[0:N / 2])
  #pragma omp target
  for (int i = 0; i < N; i++) c[i] += 1;
  #pragma omp target exit data map(from : c[0:N])
  printf("after exit: c[0]=%d c[N-1]=%d present=%d\n", c[0], c[N - 1], omp_target_is_present(c, omp_get_default_device()));

  // Reference counts: a second enter keeps the data alive through one exit.
  int d = 5;
  #pragma omp target enter data map(to : d)
  #pragma omp target enter data map(to : d)
  #pragma omp target exit data map(release : d)
  printf("refcount 2 -> release: present=%d\n", omp_target_is_present(&d, omp_get_default_device()));
  #pragma omp target exit data map(release : d)
  printf("release again: present=%d\n", omp_target_is_present(&d, omp_get_default_device()));

  // `delete` drops every reference at once.
  #pragma omp target enter data map(to : d)
  #pragma omp target enter data map(to : d)
  #pragma omp target exit data map(delete : d)
  printf("delete: present=%d\n", omp_target_is_present(&d, omp_get_default_device()));

  // `always` copies even when the data is already present.
  int e = 1;
  #pragma omp target data map(tofrom : e)
  {
    e = 42;
    #pragma omp target map(always, to : e)
    { e += 1; }
    #pragma omp target map(always, from : e)
    { e += 1; }
    printf("always: e=%d\n", e);
  }

  // alloc + zero-length section on unmapped memory.
  int *p = a;
  #pragma omp target map(alloc : b[0:N]) map(tofrom : p[0:0])
  { b[0] = 7; }
  printf("alloc region ran, b[0] on host still %d\n", b[0]);
  return 0;
}
