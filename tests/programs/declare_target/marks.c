// Explicit marks: to/enter with each device_type, link for a variable, a 3-deep implicit
// chain, recursion and a function pointer passed into a target region.
// Expected: r=<see test> printed as "chain=… rec=… ptr=… any=… link=…"
#include <stdio.h>

#pragma omp begin declare target device_type(host)
int host_only(int x) { return x + 1; }
#pragma omp end declare target

#pragma omp begin declare target device_type(any)
int any_fn(int x) { return x * 3; }
#pragma omp end declare target

int nohost_fn(int x) { return x - 1; }
#pragma omp declare target to(nohost_fn) device_type(nohost)

int linked[4] = {1, 2, 3, 4};
#pragma omp declare target link(linked)

int leaf(int x) { return x + 100; }
int mid(int x) { return leaf(x) * 2; }
int top(int x) { return mid(x) + 1; }

int rec_a(int n);
int rec_b(int n) { return n <= 0 ? 0 : 1 + rec_a(n - 1); }
int rec_a(int n) { return n <= 0 ? 0 : 10 + rec_b(n - 1); }

static int add7(int x) { return x + 7; }
int apply(int (*f)(int), int x) { return f(x); }

int main(void) {
  int chain = 0, rec = 0, ptr = 0, any = 0, link = 0;
#pragma omp target map(tofrom : chain, rec, ptr, any, link, linked)
  {
    chain = top(1);
    rec = rec_a(4);
    ptr = apply(add7, 1);
    any = any_fn(nohost_fn(5));
    link = linked[0] + linked[3];
  }
  printf("chain=%d rec=%d ptr=%d any=%d link=%d host=%d\n", chain, rec, ptr, any, link, host_only(1));
  return 0;
}
