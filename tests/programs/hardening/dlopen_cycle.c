// Issue 12 item 2: every dlopen/launch/dlclose of a library with target regions must give
// back what its device image held (the memfd it was loaded from). Runs the cycle argv[2]
// times under a 256-descriptor limit.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

int main(int argc, char **argv) {
  if (argc < 3)
    return 2;
  int cycles = atoi(argv[2]);
  struct rlimit rl = {256, 256};
  if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
    perror("setrlimit");
    return 2;
  }
  int x = 0;
#pragma omp target map(tofrom : x) // keeps the runtime loaded and initialised
  x = 1;
  for (int i = 0; i < cycles; i++) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      printf("cycle %d: dlopen failed: %s\n", i, dlerror());
      return 1;
    }
    int (*run)(int) = (int (*)(int))dlsym(h, "lib_run");
    int r = run ? run(i) : -1;
    if (r != i + 5) {
      printf("cycle %d: got %d, expected %d\n", i, r, i + 5);
      return 1;
    }
    dlclose(h);
  }
  printf("%d cycles ok x=%d\n", cycles, x);
  return 0;
}
