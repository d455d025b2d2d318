// Issue 12 item 5: freeing a pointer twice, or one never allocated, is reported, not a
// crash in the C library.
#include <omp.h>
#include <stdio.h>

int main(void) {
  int host = omp_get_initial_device();
  int on_stack = 0;
  char *h = omp_target_alloc(32, host);
  omp_target_free(h, host);
  omp_target_free(h, host);
  omp_target_free(&on_stack, host);
  printf("host device: survived\n");
  char *d = omp_target_alloc(32, 0);
  omp_target_free(d, 1); // the wrong device
  omp_target_free(d, 0);
  omp_target_free(d, 0);
  omp_target_free(&on_stack, 0);
  printf("device 0: survived\n");
  // Memory freed and allocated again is usable again.
  h = omp_target_alloc(32, host);
  omp_target_memset(h, 1, 32, host);
  omp_target_free(h, host);
  printf("done\n");
  return 0;
}
