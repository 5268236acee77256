// Times cuMemAlloc+cuMemFree pairs from a recursion `depth` frames deep, the way cudart reaches
// the driver (dlopen + cuGetProcAddress_v2), and prints the mean cost of one pair. Run it under
// `cumemtrace run --stack-depth N` to see what tracing and stack capture add per event. With
// --async (last), the pairs are cuMemAllocAsync+cuMemFreeAsync on the default stream: the pool
// path, with its sampler and the stream's device.
//   unwind_alloc_pairs [pairs=200000] [depth=20] [driver=libcuda.so.1] [--async]
#include <cuda.h>
#include <dlfcn.h>

#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);
using MemAlloc = CUresult (*)(CUdeviceptr*, size_t);
using MemFree = CUresult (*)(CUdeviceptr);
using MemAllocAsync = CUresult (*)(CUdeviceptr*, size_t, CUstream);
using MemFreeAsync = CUresult (*)(CUdeviceptr, CUstream);

GetProcAddress g_gpa;
MemAlloc g_alloc;
MemFree g_free;
MemAllocAsync g_alloc_async;  // set with --async
MemFreeAsync g_free_async;

void* entry(const char* name, int version) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (g_gpa(name, &fn, version, 0, &status) != CUDA_SUCCESS || !fn) {
    std::fprintf(stderr, "cuGetProcAddress_v2(%s) failed\n", name);
    std::exit(1);
  }
  return fn;
}

double g_cpu_ns = 0;

double thread_cpu_ns() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e9 + static_cast<double>(ts.tv_nsec);
}

// Wall time per pair; g_cpu_ns gets the thread's CPU time per pair, which leaves out the time
// the producer sleeps waiting for a collector that falls behind.
double run_pairs(long pairs) {
  const double c0 = thread_cpu_ns();
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < pairs; ++i) {
    CUdeviceptr p = 0;
    if (g_alloc_async) {
      if (g_alloc_async(&p, 256, nullptr) != CUDA_SUCCESS ||
          g_free_async(p, nullptr) != CUDA_SUCCESS) {
        std::exit(1);
      }
    } else if (g_alloc(&p, 256) != CUDA_SUCCESS || g_free(p) != CUDA_SUCCESS) {
      std::exit(1);
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  g_cpu_ns = (thread_cpu_ns() - c0) / static_cast<double>(pairs);
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / static_cast<double>(pairs);
}

__attribute__((noinline)) double recurse(int depth, long pairs) {
  double r = depth <= 1 ? run_pairs(pairs) : recurse(depth - 1, pairs);
  asm volatile("" ::: "memory");
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const bool async = argc > 1 && std::strcmp(argv[argc - 1], "--async") == 0;
  if (async) --argc;
  const long pairs = argc > 1 ? std::atol(argv[1]) : 200000;
  const int depth = argc > 2 ? std::atoi(argv[2]) : 20;
  void* lib = dlopen(argc > 3 ? argv[3] : "libcuda.so.1", RTLD_NOW);
  if (!lib) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  g_gpa = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
  if (!g_gpa) return 1;
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(entry("cuInit", 12000));
  auto device_get = reinterpret_cast<CUresult (*)(CUdevice*, int)>(entry("cuDeviceGet", 12000));
  auto retain = reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(
      entry("cuDevicePrimaryCtxRetain", 12000));
  auto set_current = reinterpret_cast<CUresult (*)(CUcontext)>(entry("cuCtxSetCurrent", 12000));
  g_alloc = reinterpret_cast<MemAlloc>(entry("cuMemAlloc", 3020));
  g_free = reinterpret_cast<MemFree>(entry("cuMemFree", 3020));
  if (async) {
    g_alloc_async = reinterpret_cast<MemAllocAsync>(entry("cuMemAllocAsync", 11020));
    g_free_async = reinterpret_cast<MemFreeAsync>(entry("cuMemFreeAsync", 11020));
  }
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (init(0) || device_get(&dev, 0) || retain(&ctx, dev) || set_current(ctx)) {
    std::fprintf(stderr, "driver setup failed\n");
    return 1;
  }
  recurse(depth, 2000);  // warm: first-touch costs, rule cache
  const double ns = recurse(depth, pairs);
  std::printf("%ld pairs from depth %d: %.1f ns per alloc+free pair (%.1f ns CPU)\n", pairs, depth,
              ns, g_cpu_ns);
  return 0;
}
