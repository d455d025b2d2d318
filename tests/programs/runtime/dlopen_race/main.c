// One thread dlopens and dlcloses a library with target regions while two others launch
// kernels: registration (under the loader's lock) races with image loading (which needs it).
// A runtime that holds its own lock across dlopen deadlocks here.
// usage: main LIBRARY CYCLES
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static const char *lib_path;
static int cycles;
static volatile int failed;

static void *loader(void *arg) {
  (void)arg;
  for (int i = 0; i < cycles; i++) {
    void *h = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "dlopen: %s\n", dlerror());
      failed = 1;
      return NULL;
    }
    int (*work)(int) = (int (*)(int))dlsym(h, "lib_work");
    if (!work || work(i) != i + 1)
      failed = 1;
    dlclose(h);
  }
  return NULL;
}

static void *launcher(void *arg) {
  int base = (int)(long)arg;
  for (int i = 0; i < cycles * 4; i++) {
    int r = 0;
    #pragma omp target map(from : r)
    r = base + i;
    if (r != base + i)
      failed = 1;
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: main LIBRARY CYCLES\n");
    return 2;
  }
  lib_path = argv[1];
  cycles = atoi(argv[2]);
  pthread_t t[3];
  pthread_create(&t[0], NULL, loader, NULL);
  pthread_create(&t[1], NULL, launcher, (void *)1000L);
  pthread_create(&t[2], NULL, launcher, (void *)2000L);
  for (int i = 0; i < 3; i++)
    pthread_join(t[i], NULL);
  printf("%s\n", failed ? "wrong results" : "no deadlock, right results");
  return failed;
}
