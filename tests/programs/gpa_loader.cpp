// Contract: see gpa_loader.h. Each lookup names the base symbol, as cudart does; the driver
// chooses the ABI (`_v2`, `_ptsz`) from the version and flags.
#include "gpa_loader.h"

#include <dlfcn.h>

#include <cstdio>

namespace cumemtrace::testprog {

namespace {

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t,
                                    CUdriverProcAddressQueryResult*);

constexpr cuuint64_t kLegacyStream = 0;
constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

template <typename... Args>
CUresult not_found(Args...) {
  return CUDA_ERROR_NOT_FOUND;
}

class Resolver {
 public:
  explicit Resolver(GetProcAddress gpa) : gpa_(gpa) {}

  template <typename... Args>
  void operator()(CUresult (*&slot)(Args...), const char* name, int version,
                  cuuint64_t flags = kLegacyStream) {
    void* fn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    const CUresult r = gpa_(name, &fn, version, flags, &status);
    if (r == CUDA_SUCCESS && status == CU_GET_PROC_ADDRESS_SUCCESS && fn) {
      slot = reinterpret_cast<CUresult (*)(Args...)>(fn);
    } else if (r == CUDA_ERROR_NOT_FOUND) {
      slot = &not_found<Args...>;
    } else {
      std::fprintf(stderr, "ct: cuGetProcAddress_v2(%s, %d, %llu) failed: CUresult %d\n", name,
                   version, static_cast<unsigned long long>(flags), static_cast<int>(r));
      ok_ = false;
    }
  }

  bool ok() const { return ok_; }

 private:
  GetProcAddress gpa_;
  bool ok_ = true;
};

}  // namespace

bool load_driver_entry_points(DriverEntryPoints* out) {
  void* libcuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!libcuda) {
    std::fprintf(stderr, "ct: dlopen libcuda.so.1: %s\n", dlerror());
    return false;
  }
  auto gpa = reinterpret_cast<GetProcAddress>(dlsym(libcuda, "cuGetProcAddress_v2"));
  if (!gpa) {
    std::fprintf(stderr, "ct: dlsym cuGetProcAddress_v2: %s\n", dlerror());
    return false;
  }
  DriverEntryPoints& e = *out;
  Resolver get(gpa);
  get(e.init, "cuInit", 12000);
  get(e.deviceGet, "cuDeviceGet", 12000);
  get(e.primaryCtxRetain, "cuDevicePrimaryCtxRetain", 12000);
  get(e.ctxSetCurrent, "cuCtxSetCurrent", 12000);
  get(e.ctxGetCurrent, "cuCtxGetCurrent", 12000);
  get(e.memGetInfo, "cuMemGetInfo", 12000);
  get(e.memAlloc, "cuMemAlloc", 3020);
  get(e.memFree, "cuMemFree", 3020);
  get(e.memAllocPitch, "cuMemAllocPitch", 3020);
  get(e.memAllocManaged, "cuMemAllocManaged", 6000);
  get(e.streamCreate, "cuStreamCreate", 12000);
  get(e.streamDestroy, "cuStreamDestroy", 12000);
  get(e.memAllocAsync, "cuMemAllocAsync", 11020, kLegacyStream);
  get(e.memAllocAsyncPtsz, "cuMemAllocAsync", 11020, kPerThread);
  get(e.memAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, kLegacyStream);
  get(e.memAllocFromPoolAsyncPtsz, "cuMemAllocFromPoolAsync", 11020, kPerThread);
  get(e.memFreeAsync, "cuMemFreeAsync", 11020, kLegacyStream);
  get(e.memFreeAsyncPtsz, "cuMemFreeAsync", 11020, kPerThread);
  get(e.memPoolCreate, "cuMemPoolCreate", 11020);
  get(e.deviceGetMemPool, "cuDeviceGetMemPool", 11020);
  get(e.memPoolTrimTo, "cuMemPoolTrimTo", 11020);
  get(e.memGetAllocationGranularity, "cuMemGetAllocationGranularity", 12000);
  get(e.memAddressReserve, "cuMemAddressReserve", 12000);
  get(e.memAddressFree, "cuMemAddressFree", 12000);
  get(e.memCreate, "cuMemCreate", 12000);
  get(e.memRelease, "cuMemRelease", 12000);
  get(e.memRetainAllocationHandle, "cuMemRetainAllocationHandle", 12000);
  get(e.memExportToShareableHandle, "cuMemExportToShareableHandle", 12000);
  get(e.memImportFromShareableHandle, "cuMemImportFromShareableHandle", 12000);
  get(e.memMap, "cuMemMap", 12000);
  get(e.memUnmap, "cuMemUnmap", 12000);
  get(e.memSetAccess, "cuMemSetAccess", 12000);
  get(e.memHostAlloc, "cuMemHostAlloc", 2020);
  get(e.memAllocHost, "cuMemAllocHost", 12000);
  get(e.memFreeHost, "cuMemFreeHost", 2000);
  get(e.graphCreate, "cuGraphCreate", 12000);
  get(e.graphDestroy, "cuGraphDestroy", 12000);
  get(e.graphAddMemAllocNode, "cuGraphAddMemAllocNode", 12000);
  get(e.graphAddMemFreeNode, "cuGraphAddMemFreeNode", 12000);
  get(e.graphAddNode, "cuGraphAddNode", 12030);
  get(e.graphInstantiate, "cuGraphInstantiateWithFlags", 12000);
  get(e.graphExecDestroy, "cuGraphExecDestroy", 12000);
  get(e.graphLaunch, "cuGraphLaunch", 12000);
  get(e.streamBeginCapture, "cuStreamBeginCapture", 12000);
  get(e.streamEndCapture, "cuStreamEndCapture", 12000);
  get(e.deviceGraphMemTrim, "cuDeviceGraphMemTrim", 12000);
  get(e.ipcGetMemHandle, "cuIpcGetMemHandle", 12000);
  get(e.ipcOpenMemHandle, "cuIpcOpenMemHandle", 12000);
  get(e.ipcCloseMemHandle, "cuIpcCloseMemHandle", 12000);
  get(e.arrayCreate, "cuArrayCreate", 3020);
  get(e.array3DCreate, "cuArray3DCreate", 3020);
  get(e.mipmappedArrayCreate, "cuMipmappedArrayCreate", 12000);
  get(e.arrayDestroy, "cuArrayDestroy", 12000);
  get(e.mipmappedArrayDestroy, "cuMipmappedArrayDestroy", 12000);
  get(e.importExternalMemory, "cuImportExternalMemory", 12000);
  get(e.externalMemoryGetMappedBuffer, "cuExternalMemoryGetMappedBuffer", 12000);
  get(e.destroyExternalMemory, "cuDestroyExternalMemory", 12000);
  get(e.ctxCreate, "cuCtxCreate", 12050);
  get(e.ctxDestroy, "cuCtxDestroy", 4000);
  get(e.primaryCtxRelease, "cuDevicePrimaryCtxRelease", 11000);
  return get.ok();
}

}  // namespace cumemtrace::testprog
