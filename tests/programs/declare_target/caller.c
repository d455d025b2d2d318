// Calls callees defined in another file: ext_marked (declare target there) and ext_plain.
#include <stdio.h>
int ext_marked(int);
#ifdef USE_PLAIN
int ext_plain(int);
#endif

int main(void) {
  int r = 1;
#pragma omp target map(tofrom : r)
  {
    r = ext_marked(r);
#ifdef USE_PLAIN
    r = ext_plain(r);
#endif
  }
  printf("r=%d\n", r);
  return 0;
}
