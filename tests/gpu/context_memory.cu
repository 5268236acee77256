// Real-GPU probe for tests/gpu/validate_context_memory.sh: creates a CUDA context, asks
// nvidia-smi what the process holds on the GPU right after (before allocating anything), then
// allocates, launches a kernel (which loads its module) and asks again. Prints one line per
// reading, "probe KEY BYTES" (nvidia-smi reports MiB; BYTES = MiB * 1048576), for the script to
// compare with what cumemtrace recorded.
//   context_memory runtime  cudaFree(0) creates the primary context (cuDevicePrimaryCtxRetain)
//   context_memory driver   cuCtxCreate creates a context, cuCtxDestroy ends it
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

// This process's used GPU memory as nvidia-smi reports it, in bytes; -1 when not listed.
long long smi_bytes() {
  FILE* f =
      popen("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits", "r");
  if (!f) return -1;
  long long found = -1;
  char line[256];
  while (fgets(line, sizeof line, f)) {
    long pid = 0;
    long long mib = 0;
    if (sscanf(line, "%ld, %lld", &pid, &mib) == 2 && pid == getpid()) found = mib << 20;
  }
  pclose(f);
  return found;
}

void report(const char* key) {
  std::printf("probe %s %lld\n", key, smi_bytes());
  std::fflush(stdout);
}

__global__ void touch(char* p) {
  p[threadIdx.x] = 1;
}

#define CHECK_RT(x)                                                \
  do {                                                             \
    cudaError_t e = (x);                                           \
    if (e != cudaSuccess) {                                        \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); \
      std::exit(3);                                                \
    }                                                              \
  } while (0)
#define CHECK_DRV(x)                                                   \
  do {                                                                 \
    CUresult r = (x);                                                  \
    if (r != CUDA_SUCCESS) {                                           \
      std::fprintf(stderr, "%s: error %d\n", #x, static_cast<int>(r)); \
      std::exit(3);                                                    \
    }                                                                  \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "runtime";
  if (mode == "runtime") {
    CHECK_RT(cudaFree(nullptr));  // the primary context, nothing allocated
    report("after_context");
    char* p = nullptr;
    CHECK_RT(cudaMalloc(&p, 64 << 20));
    report("after_alloc");
    touch<<<1, 32>>>(p);
    CHECK_RT(cudaDeviceSynchronize());
    report("after_kernel");
    CHECK_RT(cudaFree(p));
    return 0;
  }
  if (mode == "driver") {
    CHECK_DRV(cuInit(0));
    CUdevice dev = 0;
    CHECK_DRV(cuDeviceGet(&dev, 0));
    CUcontext ctx = nullptr;
    CHECK_DRV(cuCtxCreate(&ctx, nullptr, 0, dev));
    report("after_context");
    CUdeviceptr p = 0;
    CHECK_DRV(cuMemAlloc(&p, 64 << 20));
    report("after_alloc");
    CHECK_DRV(cuMemFree(p));
    CHECK_DRV(cuCtxDestroy(ctx));
    report("after_destroy");
    return 0;
  }
  std::fprintf(stderr, "usage: context_memory runtime|driver\n");
  return 2;
}
