// Recursion in device code: its stack use is not known when the kernel is built.
#include <stdio.h>

#pragma omp declare target
long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }
int is_odd(int n);
int is_even(int n) { return n == 0 ? 1 : is_odd(n - 1); }
int is_odd(int n) { return n == 0 ? 0 : is_even(n - 1); }
#pragma omp end declare target

int main(void) {
  long f = 0;
  int e = 0;
#pragma omp target map(from : f, e)
  {
    f = fib(20);
    e = is_even(10);
  }
  printf("%ld %d\n", f, e);
  return 0;
}
