// Compiles for the host; fails for a device whose options define DEVICE_BREAK.
#pragma omp declare target
int f(void) {
#ifdef DEVICE_BREAK
  return no_such_variable;
#else
  return 1;
#endif
}
#pragma omp end declare target

int main(void) {
  int r = 0;
#pragma omp target map(from : r)
  r = f();
  return r == 1 ? 0 : 1;
}
