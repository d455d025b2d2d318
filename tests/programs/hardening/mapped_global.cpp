// Issue 12 item 24 (in the spirit of LLVM 22's ctor_dtor_api.cpp): device-memory API calls
// that name declare-target data, before any kernel ran, load the device image first (its
// global constructors run) and answer with the device copy.
#include <omp.h>
#include <stdio.h>

struct S {
  int v;
  S() : v(42) {}
};

S s;
int g = 7;
#pragma omp declare target(s, g)

int main() {
  int dev = omp_get_default_device();
  void *ps = omp_get_mapped_ptr(&s, dev);
  printf("present=%d\n", omp_target_is_present(&g, dev));
  void *pg = omp_get_mapped_ptr(&g, dev);
  printf("mapped: s %s, g %s\n", ps && ps != (void *)&s ? "device copy" : "none",
         pg && pg != (void *)&g ? "device copy" : "none");
  int v = -1, w = -1;
  if (ps)
    omp_target_memcpy(&v, ps, sizeof v, 0, 0, omp_get_initial_device(), dev);
  if (pg)
    omp_target_memcpy(&w, pg, sizeof w, 0, 0, omp_get_initial_device(), dev);
  printf("device s.v=%d g=%d\n", v, w);
  int k = 0;
#pragma omp target map(from : k)
  k = s.v + g;
  printf("kernel k=%d\n", k);
  return 0;
}
