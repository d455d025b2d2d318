// Structs with pointer members, nested members and partial struct maps.
#include <stdio.h>
#include <stdlib.h>

typedef struct {
  int n;
  double *data;
  double scale;
} vec_t;

typedef struct {
  vec_t v;
  int tag;
  int *counts;
} holder_t;

int main(void) {
  vec_t v;
  v.n = 64;
  v.scale = 3.0;
  v.data = malloc(sizeof(double) * v.n);
  for (int i = 0; i < v.n; i++) v.data[i] = i;

  #pragma omp target map(to : v) map(tofrom : v.data[0:v.n])
  for (int i = 0; i < v.n; i++) v.data[i] *= v.scale;
  double s = 0;
  for (int i = 0; i < v.n; i++) s += v.data[i];
  printf("struct member section: sum=%.1f host pointer intact=%d\n", s, v.data != NULL);

  // Pointer-to-struct with the pointee section mapped through the pointer.
  vec_t *pv = &v;
  #pragma omp target enter data map(to : pv[0:1])
  #pragma omp target enter data map(to : pv->data[0:pv->n])
  #pragma omp target
  for (int i = 0; i < pv->n; i++) pv->data[i] += 1.0;
  #pragma omp target exit data map(from : pv->data[0:pv->n])
  #pragma omp target exit data map(release : pv[0:1])
  printf("through pointer: data[0]=%.1f data[63]=%.1f\n", v.data[0], v.data[63]);

  // Nested struct with two pointer members.
  holder_t h;
  h.tag = 9;
  h.v = v;
  h.counts = calloc(16, sizeof(int));
  #pragma omp target map(tofrom : h.tag, h.counts[0:16]) map(to : h.v.data[0:h.v.n], h.v.n)
  {
    for (int i = 0; i < 16; i++) h.counts[i] = (int)h.v.data[i] + h.tag;
    h.tag = -1;
  }
  printf("nested: counts[0]=%d counts[15]=%d tag=%d\n", h.counts[0], h.counts[15], h.tag);

  free(v.data);
  free(h.counts);
  return 0;
}
