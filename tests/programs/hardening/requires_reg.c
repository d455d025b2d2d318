// Issue 12 item 23 (LLVM 22's offloading/requires.c, rewritten): a binary registered by
// hand with two `requires` entries in clang 20+'s 56-byte layout (version 0, as built by
// hand). REQ=1 agrees with a program without `requires`; REQ=2 (reverse_offload) does not
// and must stop the program. BAD_TABLE registers an unreadable table instead.
#include <omp.h>
#include <stdint.h>
#include <stdio.h>

#ifndef REQ
#define REQ 1
#endif

struct entry {
  uint64_t reserved;
  uint16_t version;
  uint16_t kind;
  uint32_t flags;
  void *addr;
  const char *name;
  uint64_t size;
  uint64_t data;
  void *aux;
};

struct image {
  void *start, *end;
  struct entry *entries_begin, *entries_end;
};

struct desc {
  int32_t num_images;
  struct image *images;
  struct entry *entries_begin, *entries_end;
};

void __tgt_register_lib(struct desc *);
void __tgt_unregister_lib(struct desc *);

int main(void) {
  struct entry entries[2] = {{0, 0, 1, 0x10, NULL, "", 0, 1, NULL}, {0, 0, 1, 0x10, NULL, "", 0, REQ, NULL}};
#ifdef BAD_TABLE
  struct entry *end = (struct entry *)((char *)&entries[1] + 20); // a ragged table
#else
  struct entry *end = &entries[2];
#endif
  struct image img = {NULL, NULL, entries, end};
  struct desc d = {1, &img, entries, end};
  __tgt_register_lib(&d);
  printf("registered\n");
  __tgt_unregister_lib(&d);
  int on_host = -1;
#pragma omp target map(from : on_host)
  on_host = omp_is_initial_device();
  printf("on_host=%d\n", on_host);
  return 0;
}
