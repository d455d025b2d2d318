// The raw-driver floor of the speed table: what the CUDA driver itself costs for an empty
// kernel launch + synchronize, and for cuMemcpy host<->device of 8 KiB and 64 MiB (pageable
// host memory, as `map` copies it). No OpenMP, no CUDA toolkit: libcuda.so.1 is opened at run
// time and the empty kernel is PTX the driver compiles, so this builds anywhere with cc.
// Prints `metric NAME VALUE UNIT` lines; exits 77 (skipped) where there is no driver or GPU.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;
typedef unsigned long long CUdeviceptr;

static const char PTX[] = ".version 7.8\n.target sm_90\n.address_size 64\n"
                          ".visible .entry gc_empty()\n{\n\tret;\n}\n";

static struct {
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*PrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*ModuleLoadData)(CUmodule *, const void *);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           unsigned, CUstream, void **, void **);
  CUresult (*CtxSynchronize)(void);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
} cu;

static void check(CUresult rc, const char *what) {
  if (rc != 0) {
    fprintf(stderr, "floor: %s failed with CUDA error %d\n", what, rc);
    exit(1);
  }
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum { ROUNDS = 7 };

static double median(double *v) {
  qsort(v, ROUNDS, sizeof *v, by_value);
  return v[ROUNDS / 2];
}

// Median over rounds of the time of one host->device then device->host copy of `bytes`.
static void copies(const char *name, size_t bytes, int batch, int in_ms) {
  char *h = malloc(bytes);
  memset(h, 1, bytes);
  CUdeviceptr d;
  check(cu.MemAlloc(&d, bytes), "cuMemAlloc");
  double up[ROUNDS], down[ROUNDS];
  for (int r = -1; r < ROUNDS; r++) {
    double t0 = now();
    for (int i = 0; i < batch; i++) check(cu.MemcpyHtoD(d, h, bytes), "cuMemcpyHtoD");
    double t1 = now();
    for (int i = 0; i < batch; i++) check(cu.MemcpyDtoH(h, d, bytes), "cuMemcpyDtoH");
    double t2 = now();
    if (r >= 0) {
      up[r] = (t1 - t0) / batch;
      down[r] = (t2 - t1) / batch;
    }
  }
  double u = median(up), w = median(down), scale = in_ms ? 1e3 : 1e6;
  const char *unit = in_ms ? "ms" : "us";
  printf("metric memcpy_htod_%s %.3f %s\n", name, u * scale, unit);
  printf("metric memcpy_dtoh_%s %.3f %s\n", name, w * scale, unit);
  printf("metric memcpy_tofrom_%s %.3f %s\n", name, (u + w) * scale, unit);
  printf("metric memcpy_tofrom_%s_bw %.2f GB/s\n", name, 2.0 * bytes / (u + w) / 1e9);
  check(cu.MemFree(d), "cuMemFree");
  free(h);
}

#define LOAD(field, sym)                                                   \
  do {                                                                     \
    *(void **)&cu.field = dlsym(lib, sym);                                 \
    if (!cu.field) {                                                       \
      fprintf(stderr, "floor: libcuda.so.1 lacks %s\n", sym);              \
      return 1;                                                            \
    }                                                                      \
  } while (0)

int main(int argc, char **argv) {
  int full = argc > 1 ? atoi(argv[1]) : 1;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) {
    printf("skip no CUDA driver (libcuda.so.1: %s)\n", dlerror());
    return 77;
  }
  LOAD(Init, "cuInit");
  LOAD(DeviceGet, "cuDeviceGet");
  LOAD(PrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  LOAD(CtxSetCurrent, "cuCtxSetCurrent");
  LOAD(ModuleLoadData, "cuModuleLoadData");
  LOAD(ModuleGetFunction, "cuModuleGetFunction");
  LOAD(LaunchKernel, "cuLaunchKernel");
  LOAD(CtxSynchronize, "cuCtxSynchronize");
  LOAD(MemAlloc, "cuMemAlloc_v2");
  LOAD(MemFree, "cuMemFree_v2");
  LOAD(MemcpyHtoD, "cuMemcpyHtoD_v2");
  LOAD(MemcpyDtoH, "cuMemcpyDtoH_v2");
  if (cu.Init(0) != 0) {
    printf("skip cuInit failed: no usable GPU\n");
    return 77;
  }
  CUdevice dev;
  CUcontext ctx;
  CUmodule mod;
  CUfunction fn;
  check(cu.DeviceGet(&dev, 0), "cuDeviceGet");
  check(cu.PrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(cu.CtxSetCurrent(ctx), "cuCtxSetCurrent");
  check(cu.ModuleLoadData(&mod, PTX), "cuModuleLoadData");
  check(cu.ModuleGetFunction(&fn, mod, "gc_empty"), "cuModuleGetFunction");
  int batch = full ? 2000 : 20;
  double v[ROUNDS];
  for (int r = -1; r < ROUNDS; r++) {
    double t0 = now();
    for (int i = 0; i < batch; i++) {
      check(cu.LaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), "cuLaunchKernel");
      check(cu.CtxSynchronize(), "cuCtxSynchronize");
    }
    if (r >= 0) v[r] = (now() - t0) / batch * 1e6;
  }
  printf("metric launch_sync %.3f us\n", median(v));
  copies("8k", 8192, full ? 1000 : 10, 0);
  copies("64m", (size_t)64 << 20, 1, 1);
  return 0;
}
