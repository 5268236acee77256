// Contract: a program that loads libcumemtrace.so itself. The dynamic loader ignores LD_PRELOAD
// paths for setuid/setgid programs (AT_SECURE), so this is how such a program can still meet the
// preload (a plugin, a launcher that dlopens it); the preload must then leave it untraced.
// Usage: ct_dlopen_preload LIBCUDA LIBCUMEMTRACE
// Loads LIBCUDA (the fake driver) and LIBCUMEMTRACE by path (RTLD_GLOBAL), brings device 0 up
// through the driver, then allocates 1 MiB through the preload's exported cuMemAlloc_v2 (left
// allocated). Prints "at_secure N allocated" and exits 0; 2 if a library or symbol is missing,
// 3 if a driver call fails.
#include <cuda.h>
#include <dlfcn.h>
#include <sys/auxv.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: ct_dlopen_preload LIBCUDA LIBCUMEMTRACE\n");
    return 2;
  }
  void* cuda = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  void* preload = cuda ? dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL) : nullptr;
  if (!preload) {
    fprintf(stderr, "ct_dlopen_preload: %s\n", dlerror());
    return 2;
  }
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(cuda, "cuInit"));
  auto retain =
      reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(dlsym(cuda, "cuDevicePrimaryCtxRetain"));
  auto set_current = reinterpret_cast<CUresult (*)(CUcontext)>(dlsym(cuda, "cuCtxSetCurrent"));
  auto alloc =
      reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t)>(dlsym(preload, "cuMemAlloc_v2"));
  if (!init || !retain || !set_current || !alloc) {
    fprintf(stderr, "ct_dlopen_preload: missing entry point\n");
    return 2;
  }
  CUcontext ctx = nullptr;
  CUdeviceptr p = 0;
  if (init(0) != CUDA_SUCCESS || retain(&ctx, 0) != CUDA_SUCCESS ||
      set_current(ctx) != CUDA_SUCCESS || alloc(&p, 1 << 20) != CUDA_SUCCESS) {
    fprintf(stderr, "ct_dlopen_preload: driver call failed\n");
    return 3;
  }
  printf("at_secure %lu allocated\n", getauxval(AT_SECURE));
  return 0;
}
