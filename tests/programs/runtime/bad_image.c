// A binary descriptor whose device image is not a loadable ELF: registration must not crash,
// and the first construct on the device must fail with a clear message.
#include <omp.h>
#include <stdint.h>
#include <stdio.h>

struct entry { void *addr; char *name; size_t size; int32_t flags; int32_t data; };
struct image { void *start, *end; struct entry *eb, *ee; };
struct desc { int32_t n; struct image *images; struct entry *eb, *ee; };
struct kargs { uint32_t version, num_args; void **bp, **p; int64_t *s, *t; void **names, **mappers;
               uint64_t tripcount, flags; uint32_t teams[3], threads[3], dyn; };

static char region_id;
static char kernel_name[] = "__omp_offloading_bad_kernel";
// An ELF header for x86-64 that claims to be a shared object, followed by garbage.
static unsigned char bad_elf[256] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3, 0, 62, 0};

int main(void) {
  static struct entry entries[1];
  entries[0].addr = &region_id;
  entries[0].name = kernel_name;
  static struct image img;
  img.start = bad_elf;
  img.end = bad_elf + sizeof bad_elf;
  img.eb = entries;
  img.ee = entries + 1;
  static struct desc d;
  d.n = 1;
  d.images = &img;
  d.eb = entries;
  d.ee = entries + 1;
  extern void __tgt_register_lib(struct desc *);
  extern int __tgt_target_kernel(void *, int64_t, int32_t, int32_t, void *, struct kargs *);
  __tgt_register_lib(&d);
  printf("registered: %d devices\n", omp_get_num_devices());
  fflush(stdout);
  struct kargs k = {3, 0};
  int rc = __tgt_target_kernel(NULL, 0, -1, 0, &region_id, &k);
  printf("not reached rc=%d\n", rc);
  return 0;
}
