// A library with a target region and a declare-target global, loaded and unloaded many
// times by dlopen_cycle.c.
int lib_global = 5;
#pragma omp declare target(lib_global)

int lib_run(int x) {
  int r = 0;
#pragma omp target map(tofrom : r)
  r = x + lib_global;
  return r;
}
