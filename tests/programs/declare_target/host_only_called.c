// A device_type(host) function reached from a target region through mid: ompcc must say so.
#pragma omp begin declare target device_type(host)
int hostfn(int x) { return x + 1; }
#pragma omp end declare target

int mid(int x) { return hostfn(x) * 2; }

int main(void) {
  int r = 1;
#pragma omp target map(tofrom : r)
  r = mid(r);
  return r == 4 ? 0 : 1;
}
