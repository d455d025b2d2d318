// A kernel recurses deeper than its stack allows: on a GPU the thread's stack overflows;
// on the isolated device the kernel's thread runs past its stack's guard page. The error
// says so, with the stack the kernel's threads had and how to raise it. With an argument,
// the other threads of a `parallel` region recurse (threads libomp starts, not the first).
#include <omp.h>
#include <stdio.h>

#pragma omp declare target
static int deep(volatile char *up, int n) {
  volatile char frame[1024];
  frame[0] = (char)n;
  frame[1] = up ? up[0] : 0;
  return n == 0 ? frame[0] : deep(frame, n - 1) + frame[1];
}
#pragma omp end declare target

int main(int argc, char **argv) {
  int r = 0;
  (void)argv;
  printf("before\n");
  fflush(stdout);
  if (argc > 1) {
#pragma omp target parallel num_threads(4) map(tofrom: r)
    if (omp_get_thread_num() != 0) {
      int mine = deep(0, 1 << 24);
#pragma omp atomic
      r += mine;
    }
  } else {
#pragma omp target map(tofrom: r)
    r = deep(0, 1 << 24);
  }
  printf("after %d\n", r);
  return 0;
}
