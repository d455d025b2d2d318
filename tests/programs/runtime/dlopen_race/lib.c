// A library with a target region: its constructor registers the device image, its
// destructor unregisters it (both run under the system loader's lock).
int lib_work(int x) {
  int r = 0;
  #pragma omp target map(from : r)
  r = x + 1;
  return r;
}
