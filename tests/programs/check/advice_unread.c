#include <stdio.h>
#define T (1 << 20)
static double table[T];
static double coef[10];

// A table of 8 MiB read at a few random places (most of its pages untouched: it is still
// read, and mapping it `alloc` would change the result), and 80 bytes sent by a
// `target update to` that no kernel reads (that update can go).
int main(void) {
  for (int i = 0; i < T; ++i) table[i] = i * 0.5;
  for (int i = 0; i < 10; ++i) coef[i] = i;
  double s = 0;
#pragma omp target enter data map(to: table[0:T]) map(alloc: coef[0:10])
#pragma omp target update to(coef[0:10])
#pragma omp target map(tofrom: s)
  {
    unsigned x = 12345;
    for (int k = 0; k < 64; ++k) {
      x = x * 1103515245u + 12345u;
      s += table[x % T];
    }
  }
#pragma omp target exit data map(release: table[0:T]) map(delete: coef[0:10])
  printf("s=%.1f\n", s);
  return 0;
}
