// A kernel that, when asked (any argument), writes its result to a file and splits a string:
// it runs on the CPU devices, but no GPU's device libraries have fopen, fprintf, fclose or
// strtok, so built for a GPU the program does not link. LIBOMPTARGET_CHECK=gpu names each
// call the kernel made, once per kernel; without the argument the branch is not taken and
// nothing is said.
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  int verbose = argc > 1;
  double sum = 0;
  int logged = 0;
  for (int step = 0; step < 2; ++step) {
#pragma omp target map(tofrom : sum, logged) firstprivate(verbose)
    {
      for (int i = 1; i <= 100; ++i) sum += 1.0 / i;
      if (verbose) {
        FILE *f = fopen("/dev/null", "w");
        if (f) {
          fprintf(f, "%g\n", sum);
          fclose(f);
          logged += 1;
        }
        char words[] = "a,b";
        logged += strtok(words, ",") != NULL;
      }
    }
  }
  printf("sum=%.4f logged=%d\n", sum, logged);
  return 0;
}
