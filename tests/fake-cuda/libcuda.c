/* A fake CUDA driver for tests on machines without a GPU (crates/e2e/tests/cuda_plugin.rs).
 *
 * Built by the test as libcuda.so.1 and put first on LD_LIBRARY_PATH. It implements the
 * entry points omp-plugin-cuda resolves, with host memory: cuMemAlloc is malloc, copies are
 * memcpy, kernels do not run. Controlled by the environment:
 *   FAKE_CUDA_DEVICES      number of devices (default 1; 0: cuInit says CUDA_ERROR_NO_DEVICE)
 *   FAKE_CUDA_SM           compute capability as major*10+minor (default 90)
 *   FAKE_CUDA_LOG          file to which each cuLaunchKernel appends one line:
 *                          "launch NAME grid=X,Y,Z block=X,Y,Z shared=BYTES arg0=0xFIRST_ARGUMENT"
 *   FAKE_CUDA_FAIL_LAUNCH  N: the N-th launch faults (CUDA_ERROR_ILLEGAL_ADDRESS, reported
 *                          asynchronously, sticky: every later call fails the same way)
 *   FAKE_CUDA_HANG_LAUNCH  N: the N-th launch never ends (whoever waits for its stream
 *                          blocks until a signal ends the process)
 *   FAKE_CUDA_OP_US        device time of each operation between two events, in microseconds
 *                          (cuEventElapsedTime; default 250)
 *   FAKE_CUDA_MEM_LIMIT    bytes of device memory (cuMemAlloc beyond: CUDA_ERROR_OUT_OF_MEMORY)
 *   CUDA_VISIBLE_DEVICES   set and empty: no devices, as the real driver does
 * Modules are checked as the real driver would reject them: an ELF64 EM_CUDA image whose
 * section headers lie within sane bounds (else CUDA_ERROR_INVALID_IMAGE) built for this SM's
 * major version and no newer minor one (else CUDA_ERROR_NO_BINARY_FOR_GPU).
 *
 * Streams are really asynchronous: the work enqueued on a stream (copies, memsets, launches,
 * waits on events) runs only when something waits for it (cuStreamSynchronize,
 * cuEventSynchronize, or another stream's work that waits on an event recorded after it).
 * So two streams with no event between them are unordered, as on a GPU, and a test sees the
 * stale bytes a missing cuStreamWaitEvent would let a kernel or a copy see. Host-to-device
 * copies stage their source at the call, as the real driver does for pageable memory.
 * Memsets and peer copies append "memset DST BYTES" and "peer copy BYTES from context A to
 * context B" to FAKE_CUDA_LOG when they run.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
  SUCCESS = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, NO_DEVICE = 100,
  INVALID_DEVICE = 101, INVALID_IMAGE = 200, NO_BINARY_FOR_GPU = 209, NOT_FOUND = 500,
  ILLEGAL_ADDRESS = 700, LAUNCH_FAILED = 719,
};

static int initialized, launches;
static CUresult sticky;
static size_t allocated;

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  return v && *v ? strtol(v, NULL, 0) : dflt;
}

static int sm(void) { return (int)env_long("FAKE_CUDA_SM", 90); }

CUresult cuInit(unsigned flags) {
  const char *visible = getenv("CUDA_VISIBLE_DEVICES");
  if (flags != 0) return INVALID_VALUE;
  if ((visible && !*visible) || env_long("FAKE_CUDA_DEVICES", 1) <= 0) return NO_DEVICE;
  initialized = 1;
  return SUCCESS;
}

CUresult cuDriverGetVersion(int *v) { *v = 13000; return SUCCESS; }

CUresult cuDeviceGetCount(int *n) {
  if (!initialized) return NOT_INITIALIZED;
  *n = (int)env_long("FAKE_CUDA_DEVICES", 1);
  return SUCCESS;
}

CUresult cuDeviceGet(int *dev, int ordinal) {
  if (ordinal < 0 || ordinal >= env_long("FAKE_CUDA_DEVICES", 1)) return INVALID_DEVICE;
  *dev = ordinal;
  return SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, int dev) {
  snprintf(name, (size_t)len, "Fake GPU %d (tests/fake-cuda)", dev);
  return SUCCESS;
}

CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  (void)dev;
  switch (attr) {
  case 1: case 2: *v = 1024; break;          /* threads per block, block dim x */
  case 5: *v = 2147483647; break;            /* grid dim x */
  case 8: *v = 49152; break;                 /* shared memory per block */
  case 10: *v = 32; break;                   /* warp size */
  case 13: *v = 1980000; break;              /* clock, kHz */
  case 16: *v = 132; break;                  /* multiprocessors */
  case 39: *v = 2048; break;                 /* threads per multiprocessor */
  case 75: *v = sm() / 10; break;
  case 76: *v = sm() % 10; break;
  default: *v = 0;
  }
  return SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, int dev) {
  (void)dev;
  *bytes = (size_t)env_long("FAKE_CUDA_MEM_LIMIT", 80L << 30);
  return SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev) { *ctx = (void *)(uintptr_t)(0x1000 + dev); return SUCCESS; }
CUresult cuDevicePrimaryCtxRelease_v2(int dev) { (void)dev; return SUCCESS; }
CUresult cuCtxSetCurrent(void *ctx) { (void)ctx; return SUCCESS; }
CUresult cuCtxSetLimit(int limit, size_t value) { (void)limit; (void)value; return sticky; }

static const char *names[][2] = {
  {"CUDA_SUCCESS", "no error"},
  {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
  {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
  {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
  {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
  {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
  {"CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
  {"CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
  {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
  {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
  {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
};
static const int codes[] = {0, 1, 2, 3, 100, 101, 200, 209, 500, 700, 719};

static CUresult error_text(CUresult code, const char **out, int which) {
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
    if (codes[i] == code) { *out = names[i][which]; return SUCCESS; }
  return INVALID_VALUE;
}
CUresult cuGetErrorName(CUresult code, const char **s) { return error_text(code, s, 0); }
CUresult cuGetErrorString(CUresult code, const char **s) { return error_text(code, s, 1); }

/* Device memory: malloc with a 16-byte header holding the size (for the limit). */
static CUresult device_alloc(CUdeviceptr *p, size_t size) {
  if (sticky) return sticky;
  if (size == 0) return INVALID_VALUE;
  if (allocated + size > (size_t)env_long("FAKE_CUDA_MEM_LIMIT", 80L << 30)) return OUT_OF_MEMORY;
  char *block = malloc(size + 16);
  if (!block) return OUT_OF_MEMORY;
  memcpy(block, &size, sizeof size);
  allocated += size;
  *p = (CUdeviceptr)(uintptr_t)(block + 16);
  return SUCCESS;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) { return device_alloc(p, size); }
CUresult cuMemAllocManaged(CUdeviceptr *p, size_t size, unsigned flags) { (void)flags; return device_alloc(p, size); }
CUresult cuMemFree_v2(CUdeviceptr p) {
  char *block = (char *)(uintptr_t)p - 16;
  size_t size;
  memcpy(&size, block, sizeof size);
  allocated -= size;
  free(block);
  return sticky;
}
CUresult cuMemAllocHost_v2(void **p, size_t size) { *p = malloc(size); return *p ? sticky : OUT_OF_MEMORY; }
CUresult cuMemFreeHost(void *p) { free(p); return sticky; }

/* Streams: a queue of work that runs when waited for. An event is a point in a stream's
 * queue (how many operations had been enqueued when it was recorded). */
enum { OP_COPY, OP_SET, OP_WAIT, OP_LAUNCH, OP_PEER };
struct stream;
struct op {
  int kind, byte, hang;
  unsigned char *dst, *staged;
  const unsigned char *src;
  size_t n;
  struct stream *on; /* OP_WAIT: the stream waited for, up to `upto` */
  unsigned long upto;
  void *from_ctx, *to_ctx; /* OP_PEER */
  struct op *next;
};
struct stream { struct op *head, *tail; unsigned long enqueued, done; };
struct event { struct stream *s; unsigned long seq; };

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void run(struct stream *s, unsigned long upto) {
  while (s->done < upto && s->head) {
    struct op *o = s->head;
    s->head = o->next;
    if (!s->head) s->tail = NULL;
    switch (o->kind) {
    case OP_COPY: memmove(o->dst, o->staged ? o->staged : o->src, o->n); break;
    case OP_PEER:
      memmove(o->dst, o->src, o->n);
      log_line("peer copy %zu from context %p to context %p\n", o->n, o->from_ctx, o->to_ctx);
      break;
    case OP_SET:
      memset(o->dst, o->byte, o->n);
      log_line("memset %p %zu\n", (void *)o->dst, o->n);
      break;
    case OP_WAIT: run(o->on, o->upto); break;
    case OP_LAUNCH:
      while (o->hang) pause(); /* a kernel that never ends: only a signal gets out */
      break;
    }
    free(o->staged);
    free(o);
    s->done++;
  }
}

static CUresult enqueue(void *stream, struct op o) {
  struct op *p = malloc(sizeof *p);
  if (!p) return OUT_OF_MEMORY;
  *p = o;
  p->next = NULL;
  struct stream *s = stream;
  if (!s) { /* the legacy default stream: synchronous here */
    struct stream now = {p, p, 1, 0};
    run(&now, 1);
    return SUCCESS;
  }
  if (s->tail) s->tail->next = p; else s->head = p;
  s->tail = p;
  s->enqueued++;
  return SUCCESS;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *s) {
  if (sticky) return sticky;
  unsigned char *staged = malloc(n ? n : 1);
  if (!staged) return OUT_OF_MEMORY;
  memcpy(staged, src, n);
  return enqueue(s, (struct op){.kind = OP_COPY, .dst = (unsigned char *)(uintptr_t)dst, .staged = staged, .n = n});
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *s) {
  if (sticky) return sticky;
  return enqueue(s, (struct op){.kind = OP_COPY, .dst = dst, .src = (const unsigned char *)(uintptr_t)src, .n = n});
}
CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void *s) {
  if (sticky) return sticky;
  return enqueue(s, (struct op){.kind = OP_COPY, .dst = (unsigned char *)(uintptr_t)dst,
                                .src = (const unsigned char *)(uintptr_t)src, .n = n});
}
CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void *dst_ctx, CUdeviceptr src, void *src_ctx, size_t n, void *s) {
  if (sticky) return sticky;
  if (!dst_ctx || !src_ctx) return INVALID_VALUE;
  return enqueue(s, (struct op){.kind = OP_PEER, .dst = (unsigned char *)(uintptr_t)dst,
                                .src = (const unsigned char *)(uintptr_t)src, .n = n, .from_ctx = src_ctx,
                                .to_ctx = dst_ctx});
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char byte, size_t n, void *s) {
  if (sticky) return sticky;
  return enqueue(s, (struct op){.kind = OP_SET, .dst = (unsigned char *)(uintptr_t)dst, .byte = byte, .n = n});
}

CUresult cuEventCreate(void **e, unsigned flags) {
  (void)flags;
  if (sticky) return sticky;
  *e = calloc(1, sizeof(struct event));
  return *e ? SUCCESS : OUT_OF_MEMORY;
}
CUresult cuEventRecord(void *e, void *stream) {
  struct event *ev = e;
  struct stream *s = stream;
  if (sticky) return sticky;
  if (!s) return INVALID_VALUE;
  ev->s = s;
  ev->seq = s->enqueued;
  return SUCCESS;
}
CUresult cuStreamWaitEvent(void *stream, void *e, unsigned flags) {
  struct event *ev = e;
  (void)flags;
  if (sticky) return sticky;
  if (!ev->s) return SUCCESS; /* never recorded: nothing to wait for */
  return enqueue(stream, (struct op){.kind = OP_WAIT, .on = ev->s, .upto = ev->seq});
}
CUresult cuEventSynchronize(void *e) {
  struct event *ev = e;
  if (ev->s) run(ev->s, ev->seq);
  return sticky;
}
CUresult cuEventDestroy_v2(void *e) { free(e); return SUCCESS; }
/* Every operation takes FAKE_CUDA_OP_US microseconds of device time (default 250). */
CUresult cuEventElapsedTime(float *ms, void *start, void *end) {
  struct event *a = start, *b = end;
  if (!a->s || a->s != b->s || b->seq < a->seq) return INVALID_VALUE;
  *ms = (float)(b->seq - a->seq) * (float)env_long("FAKE_CUDA_OP_US", 250) / 1000.0f;
  return SUCCESS;
}

/* Modules: a copy of the ELF image; functions and globals looked up in its symbol table. */
struct module { unsigned char *elf; size_t size; };
struct function { char name[256]; };

static uint64_t rd(const unsigned char *p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

#define SANE (1ull << 30)

CUresult cuModuleLoadDataEx(void **mod, const void *image, unsigned n, int *opts, void **vals) {
  (void)n; (void)opts; (void)vals;
  const unsigned char *e = image;
  if (sticky) return sticky;
  if (memcmp(e, "\177ELF", 4) != 0 || e[4] != 2 || rd(e + 18, 2) != 190) return INVALID_IMAGE;
  uint64_t shoff = rd(e + 0x28, 8), shentsize = rd(e + 0x3a, 2), shnum = rd(e + 0x3c, 2);
  if (shentsize != 64 || shoff > SANE || shnum > 65535) return INVALID_IMAGE;
  uint64_t size = shoff + shnum * 64;
  for (uint64_t i = 0; i < shnum; i++) {
    const unsigned char *sh = e + shoff + i * 64;
    uint64_t off = rd(sh + 0x18, 8), len = rd(sh + 0x20, 8);
    if (rd(sh + 4, 4) == 8) continue; /* NOBITS */
    if (off > SANE || len > SANE) return INVALID_IMAGE;
    if (off + len > size) size = off + len;
  }
  int flags = (int)rd(e + 48, 4);
  int image_sm = e[8] >= 8 ? (flags >> 8) & 0xff : flags & 0xff;
  if (image_sm / 10 != sm() / 10 || image_sm % 10 > sm() % 10) return NO_BINARY_FOR_GPU;
  struct module *m = malloc(sizeof *m);
  m->elf = malloc(size);
  memcpy(m->elf, e, size);
  m->size = size;
  *mod = m;
  return SUCCESS;
}

CUresult cuModuleUnload(void *mod) {
  struct module *m = mod;
  free(m->elf);
  free(m);
  return sticky;
}

/* The symbol NAME: its type, its bytes in the file (NULL for NOBITS) and size. */
static int find_symbol(struct module *m, const char *name, int *type, const unsigned char **bytes, uint64_t *size) {
  const unsigned char *e = m->elf;
  uint64_t shoff = rd(e + 0x28, 8), shnum = rd(e + 0x3c, 2);
  for (uint64_t i = 0; i < shnum; i++) {
    const unsigned char *sh = e + shoff + i * 64;
    if (rd(sh + 4, 4) != 2) continue; /* SYMTAB */
    const unsigned char *str = e + shoff + rd(sh + 0x28, 4) * 64;
    const char *strings = (const char *)e + rd(str + 0x18, 8);
    uint64_t off = rd(sh + 0x18, 8), count = rd(sh + 0x20, 8) / 24;
    for (uint64_t s = 0; s < count; s++) {
      const unsigned char *sym = e + off + s * 24;
      if (strcmp(strings + rd(sym, 4), name) != 0) continue;
      const unsigned char *home = e + shoff + rd(sym + 6, 2) * 64;
      *type = sym[4] & 0xf;
      *size = rd(sym + 16, 8);
      *bytes = rd(home + 4, 4) == 8 ? NULL : e + rd(home + 0x18, 8) + rd(sym + 8, 8) - rd(home + 0x10, 8);
      return 1;
    }
  }
  return 0;
}

CUresult cuModuleGetFunction(void **f, void *mod, const char *name) {
  int type;
  const unsigned char *bytes;
  uint64_t size;
  if (sticky) return sticky;
  if (!find_symbol(mod, name, &type, &bytes, &size) || type != 2) return NOT_FOUND;
  struct function *fn = calloc(1, sizeof *fn);
  snprintf(fn->name, sizeof fn->name, "%s", name);
  *f = fn;
  return SUCCESS;
}

/* Globals get device memory once per module and name, initialised from the image. */
struct global { void *mod; char name[256]; CUdeviceptr ptr; size_t size; struct global *next; };
static struct global *globals;

CUresult cuModuleGetGlobal_v2(CUdeviceptr *ptr, size_t *bytes_out, void *mod, const char *name) {
  int type;
  const unsigned char *bytes;
  uint64_t size;
  if (sticky) return sticky;
  for (struct global *g = globals; g; g = g->next)
    if (g->mod == mod && strcmp(g->name, name) == 0) {
      if (ptr) *ptr = g->ptr;
      if (bytes_out) *bytes_out = g->size;
      return SUCCESS;
    }
  if (!find_symbol(mod, name, &type, &bytes, &size) || type != 1) return NOT_FOUND;
  struct global *g = calloc(1, sizeof *g);
  g->mod = mod;
  snprintf(g->name, sizeof g->name, "%s", name);
  g->size = size;
  g->ptr = (CUdeviceptr)(uintptr_t)calloc(1, size ? size : 1);
  if (bytes) memcpy((void *)(uintptr_t)g->ptr, bytes, size);
  g->next = globals;
  globals = g;
  if (ptr) *ptr = g->ptr;
  if (bytes_out) *bytes_out = g->size;
  return SUCCESS;
}

CUresult cuFuncSetAttribute(void *f, int attr, int value) { (void)f; (void)attr; (void)value; return sticky; }

CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
  (void)extra;
  if (sticky) return sticky;
  const char *log = getenv("FAKE_CUDA_LOG");
  if (log && *log) {
    FILE *out = fopen(log, "a");
    if (out) {
      unsigned long long arg0 = 0;
      if (params && params[0]) memcpy(&arg0, params[0], sizeof arg0);
      fprintf(out, "launch %s grid=%u,%u,%u block=%u,%u,%u shared=%u arg0=0x%llx\n", ((struct function *)f)->name, gx,
              gy, gz, bx, by, bz, shared, arg0);
      fclose(out);
    }
  }
  if (++launches == env_long("FAKE_CUDA_FAIL_LAUNCH", 0)) sticky = ILLEGAL_ADDRESS; /* seen at the next sync */
  return enqueue(stream, (struct op){.kind = OP_LAUNCH, .hang = launches == env_long("FAKE_CUDA_HANG_LAUNCH", 0)});
}

CUresult cuStreamCreate(void **s, unsigned flags) {
  (void)flags;
  if (sticky) return sticky;
  *s = calloc(1, sizeof(struct stream));
  return *s ? SUCCESS : OUT_OF_MEMORY;
}
CUresult cuStreamDestroy_v2(void *s) {
  struct stream *st = s;
  run(st, st->enqueued); /* the driver finishes a destroyed stream's work */
  free(st);
  return SUCCESS;
}
CUresult cuStreamSynchronize(void *s) {
  struct stream *st = s;
  run(st, st->enqueued);
  return sticky;
}

static void log_line(const char *fmt, ...) {
  const char *log = getenv("FAKE_CUDA_LOG");
  if (!log || !*log) return;
  FILE *out = fopen(log, "a");
  if (!out) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(out, fmt, ap);
  va_end(ap);
  fclose(out);
}
