// Issue 12 item 4: lengths far beyond an allocation are refused with a message; the
// process survives and the memory keeps its contents.
#include <omp.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  const size_t huge = (size_t)1 << 62;
  int d0 = 0, d1 = 1, host = omp_get_initial_device();
  char *p = omp_target_alloc(64, d0);
  char *q = omp_target_alloc(64, d1);
  char *h = omp_target_alloc(64, host);
  char buf[64];
  omp_target_memset(p, 7, 64, d0);
  omp_target_memset(q, 9, 64, d1);
  printf("memset huge -> %s\n", omp_target_memset(p, 1, huge, d0) == p ? "p" : "?");
  omp_depend_t *none = NULL;
  omp_target_memset_async(p, 1, huge, d0, 0, none);
  omp_target_memset(h, 3, 64, host);
  omp_target_memset(h, 1, huge, host);
  printf("memcpy d1<-d0 huge rc=%d\n", omp_target_memcpy(q, p, huge, 0, 0, d1, d0));
  printf("memcpy d0<-d0 huge rc=%d\n", omp_target_memcpy(p, p + 32, huge, 0, 0, d0, d0));
  printf("memcpy host<-d0 huge rc=%d\n", omp_target_memcpy(buf, p, huge, 0, 0, host, d0));
  printf("memcpy d0<-host huge rc=%d\n", omp_target_memcpy(p, h, huge, 0, 0, d0, host));
  printf("memcpy offset past end rc=%d\n", omp_target_memcpy(q, p, 16, 0, 56, d1, d0));
  printf("memcpy d1<-d0 rc=%d\n", omp_target_memcpy(q, p, 64, 0, 0, d1, d0));
  memset(buf, 0, sizeof buf);
  omp_target_memcpy(buf, q, 64, 0, 0, host, d1);
  int ok = 1;
  for (int i = 0; i < 64; i++)
    ok &= buf[i] == 7 && h[i] == 3;
  printf("contents kept: %d\n", ok);
  omp_target_free(p, d0);
  omp_target_free(q, d1);
  omp_target_free(h, host);
  printf("survived\n");
  return 0;
}
