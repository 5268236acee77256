// A CUDA driver-API program linked with -lcuda (built with nvcc or g++ on the GPU host) with known
// allocations of every kind cumemtrace hooks and planted leaks. At exit on device 0:
//   leaked: 1 MiB cuMemAlloc (leak_plain), 2 MiB cuMemAllocAsync (leak_async),
//           one VMM mapping of one granularity unit (handle kept, mapped), 64 KiB pinned host
//   freed:  3 MiB cuMemAlloc, 512 KiB managed, 4 MiB async, the first VMM map/handle/VA,
//           1 MiB cuMemHostAlloc.
#include <cuda.h>

#include <cstdio>

#define CHECK(x)                                                        \
  do {                                                                  \
    CUresult r = (x);                                                   \
    if (r != CUDA_SUCCESS) {                                            \
      std::fprintf(stderr, "%s failed: %d\n", #x, static_cast<int>(r)); \
      return 3;                                                         \
    }                                                                   \
  } while (0)

// No sibling calls: `return cuMemAlloc(...)` compiled as a jump would remove the leaking
// function's frame from every unwinder's view.
__attribute__((noinline, optimize("no-optimize-sibling-calls"))) CUresult leak_plain(
    CUdeviceptr* p) {
  return cuMemAlloc(p, 1 << 20);
}
__attribute__((noinline, optimize("no-optimize-sibling-calls"))) CUresult leak_async(CUdeviceptr* p,
                                                                                     CUstream s) {
  return cuMemAllocAsync(p, 2 << 20, s);
}

int main() {
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUstream s;
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

  CUdeviceptr a, leaked, m, x, y;
  CHECK(cuMemAlloc(&a, 3 << 20));
  CHECK(leak_plain(&leaked));
  CHECK(cuMemFree(a));
  CHECK(cuMemAllocManaged(&m, 512 << 10, CU_MEM_ATTACH_GLOBAL));
  CHECK(cuMemFree(m));
  CHECK(cuMemAllocAsync(&x, 4 << 20, s));
  CHECK(cuMemFreeAsync(x, s));
  CHECK(leak_async(&y, s));
  CHECK(cuStreamSynchronize(s));

  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gran = 0;
  CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (int round = 0; round < 2; ++round) {
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    CHECK(cuMemAddressReserve(&va, 4 * gran, 0, 0, 0));
    CHECK(cuMemCreate(&h, gran, &prop, 0));
    CHECK(cuMemMap(va, gran, 0, h, 0));
    CHECK(cuMemSetAccess(va, gran, &access, 1));
    if (round == 0) {
      CHECK(cuMemUnmap(va, gran));
      CHECK(cuMemRelease(h));
      CHECK(cuMemAddressFree(va, 4 * gran));
    }
  }
  void* h1;
  void* h2;
  CHECK(cuMemHostAlloc(&h1, 1 << 20, 0));
  CHECK(cuMemAllocHost(&h2, 64 << 10));
  CHECK(cuMemFreeHost(h1));
  std::printf("granularity %zu\n", gran);
  return 0;
}
