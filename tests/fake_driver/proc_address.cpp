// Contract: cuGetProcAddress (CUDA 11.3 form) and cuGetProcAddress_v2 resolve base names the way
// the real driver does, and hand out the addresses of this library's own exports. The library is
// linked with -Bsymbolic, so `&::cuMemAlloc_v2` here is the fake's function even when a preload
// exports the same name: the pointer equals dlsym(libcuda_handle, "cuMemAlloc_v2"), which is how
// the preload recognises what it was given.
//
// Resolution of a base name, for the caller's cudaVersion and flags:
//  - named in FAKE_CUDA_GPA_ERROR ("NAME=CODE[,NAME=CODE...]", CODE a decimal CUresult): CODE,
//    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND (a driver failing a lookup for its own reasons);
//  - listed in FAKE_CUDA_MISSING, or not in the table: CUDA_ERROR_NOT_FOUND,
//    CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
//  - introduced after cudaVersion: CUDA_ERROR_NOT_FOUND,
//  CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
//  - else the `_v2` ABI from its introduction version on (the original ABI before it), then the
//    `_ptsz` variant when flags ask for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.
// *pfn is NULL on every failure. No dlsym here: the preload interposes it.
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fake_driver.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace cumemtrace::fake {

namespace {

struct ProcEntry {
  const char* name;
  int introduced;  // the cudaVersion that first knows the base name
  void* fn;        // the original ABI
  void* v2;        // the ABI handed out from v2_since on; nullptr if the name has only one
  int v2_since;
  void* ptsz;  // the per-thread-default-stream variant, if any
};

template <typename Fn>
void* addr(Fn* fn) {
  return reinterpret_cast<void*>(fn);
}

// Introduction versions are those of the real driver; cuStreamDestroy_v2 dates from CUDA 4.0.
const ProcEntry kTable[] = {
    {"cuInit", 2000, addr(&::cuInit), nullptr, 0, nullptr},
    {"cuDriverGetVersion", 2020, addr(&::cuDriverGetVersion), nullptr, 0, nullptr},
    {"cuDeviceGetCount", 2000, addr(&::cuDeviceGetCount), nullptr, 0, nullptr},
    {"cuDeviceGet", 2000, addr(&::cuDeviceGet), nullptr, 0, nullptr},
    {"cuDeviceGetPCIBusId", 4010, addr(&::cuDeviceGetPCIBusId), nullptr, 0, nullptr},
    {"cuDevicePrimaryCtxRetain", 7000, addr(&::cuDevicePrimaryCtxRetain), nullptr, 0, nullptr},
    {"cuDevicePrimaryCtxRelease", 7000, addr(&::cuDevicePrimaryCtxRelease),
     addr(&::cuDevicePrimaryCtxRelease_v2), 11000, nullptr},
    {"cuDevicePrimaryCtxReset", 7000, addr(&::cuDevicePrimaryCtxReset_v2), nullptr, 0, nullptr},
    {"cuDevicePrimaryCtxGetState", 7000, addr(&::cuDevicePrimaryCtxGetState), nullptr, 0, nullptr},
    // The fake has no 32-bit cuCtxCreate/cuCtxDestroy, and hands out cuCtxCreate_v3 only by its
    // versioned name: the first ABI it hands out is _v2, from 12.5 on _v4 as the real driver.
    {"cuCtxCreate", 3020, addr(&::cuCtxCreate_v2), addr(&::cuCtxCreate_v4), 12050, nullptr},
    {"cuCtxDestroy", 4000, addr(&::cuCtxDestroy_v2), nullptr, 0, nullptr},
    {"cuCtxSetCurrent", 4000, addr(&::cuCtxSetCurrent), nullptr, 0, nullptr},
    {"cuCtxGetCurrent", 4000, addr(&::cuCtxGetCurrent), nullptr, 0, nullptr},
    {"cuCtxGetDevice", 2000, addr(&::cuCtxGetDevice), nullptr, 0, nullptr},
    {"cuMemGetInfo", 2000, addr(&::cuMemGetInfo), addr(&::cuMemGetInfo_v2), 3020, nullptr},
    {"cuPointerGetAttribute", 4000, addr(&::cuPointerGetAttribute), nullptr, 0, nullptr},
    {"cuStreamCreate", 2000, addr(&::cuStreamCreate), nullptr, 0, nullptr},
    {"cuStreamDestroy", 2000, addr(&::cuStreamDestroy), addr(&::cuStreamDestroy_v2), 4000, nullptr},
    {"cuStreamGetDevice", 12080, addr(&::cuStreamGetDevice), nullptr, 0, nullptr},
    {"cuStreamIsCapturing", 10000, addr(&::cuStreamIsCapturing), nullptr, 0,
     addr(&::cuStreamIsCapturing_ptsz)},
    {"cuGetErrorName", 6000, addr(&::cuGetErrorName), nullptr, 0, nullptr},
    {"cuGetErrorString", 6000, addr(&::cuGetErrorString), nullptr, 0, nullptr},
    {"cuMemAlloc", 2000, addr(&::cuMemAlloc), addr(&::cuMemAlloc_v2), 3020, nullptr},
    {"cuMemAllocPitch", 2000, addr(&::cuMemAllocPitch), addr(&::cuMemAllocPitch_v2), 3020, nullptr},
    {"cuMemAllocManaged", 6000, addr(&::cuMemAllocManaged), nullptr, 0, nullptr},
    {"cuMemFree", 2000, addr(&::cuMemFree), addr(&::cuMemFree_v2), 3020, nullptr},
    {"cuMemAllocAsync", 11020, addr(&::cuMemAllocAsync), nullptr, 0, addr(&::cuMemAllocAsync_ptsz)},
    {"cuMemAllocFromPoolAsync", 11020, addr(&::cuMemAllocFromPoolAsync), nullptr, 0,
     addr(&::cuMemAllocFromPoolAsync_ptsz)},
    {"cuMemFreeAsync", 11020, addr(&::cuMemFreeAsync), nullptr, 0, addr(&::cuMemFreeAsync_ptsz)},
    {"cuMemPoolCreate", 11020, addr(&::cuMemPoolCreate), nullptr, 0, nullptr},
    {"cuMemPoolDestroy", 11020, addr(&::cuMemPoolDestroy), nullptr, 0, nullptr},
    {"cuDeviceGetDefaultMemPool", 11020, addr(&::cuDeviceGetDefaultMemPool), nullptr, 0, nullptr},
    {"cuDeviceGetMemPool", 11020, addr(&::cuDeviceGetMemPool), nullptr, 0, nullptr},
    {"cuMemPoolGetAttribute", 11020, addr(&::cuMemPoolGetAttribute), nullptr, 0, nullptr},
    {"cuMemPoolTrimTo", 11020, addr(&::cuMemPoolTrimTo), nullptr, 0, nullptr},
    {"cuMemCreate", 10020, addr(&::cuMemCreate), nullptr, 0, nullptr},
    {"cuMemRelease", 10020, addr(&::cuMemRelease), nullptr, 0, nullptr},
    {"cuMemMap", 10020, addr(&::cuMemMap), nullptr, 0, nullptr},
    {"cuMemRetainAllocationHandle", 11000, addr(&::cuMemRetainAllocationHandle), nullptr, 0,
     nullptr},
    {"cuMemExportToShareableHandle", 10020, addr(&::cuMemExportToShareableHandle), nullptr, 0,
     nullptr},
    {"cuMemImportFromShareableHandle", 10020, addr(&::cuMemImportFromShareableHandle), nullptr, 0,
     nullptr},
    {"cuMemGetAllocationPropertiesFromHandle", 10020,
     addr(&::cuMemGetAllocationPropertiesFromHandle), nullptr, 0, nullptr},
    {"cuMemUnmap", 10020, addr(&::cuMemUnmap), nullptr, 0, nullptr},
    {"cuMemSetAccess", 10020, addr(&::cuMemSetAccess), nullptr, 0, nullptr},
    {"cuMemAddressReserve", 10020, addr(&::cuMemAddressReserve), nullptr, 0, nullptr},
    {"cuMemAddressFree", 10020, addr(&::cuMemAddressFree), nullptr, 0, nullptr},
    {"cuMemGetAllocationGranularity", 10020, addr(&::cuMemGetAllocationGranularity), nullptr, 0,
     nullptr},
    {"cuMemHostAlloc", 2020, addr(&::cuMemHostAlloc), nullptr, 0, nullptr},
    {"cuMemAllocHost", 2000, addr(&::cuMemAllocHost), addr(&::cuMemAllocHost_v2), 3020, nullptr},
    {"cuMemFreeHost", 2000, addr(&::cuMemFreeHost), nullptr, 0, nullptr},
    {"cuGraphCreate", 10000, addr(&::cuGraphCreate), nullptr, 0, nullptr},
    {"cuGraphDestroy", 10000, addr(&::cuGraphDestroy), nullptr, 0, nullptr},
    {"cuGraphAddMemAllocNode", 11040, addr(&::cuGraphAddMemAllocNode), nullptr, 0, nullptr},
    {"cuGraphAddMemFreeNode", 11040, addr(&::cuGraphAddMemFreeNode), nullptr, 0, nullptr},
    {"cuGraphAddNode", 12020, addr(&::cuGraphAddNode), addr(&::cuGraphAddNode_v2), 12030, nullptr},
    {"cuGraphInstantiateWithFlags", 11040, addr(&::cuGraphInstantiateWithFlags), nullptr, 0,
     nullptr},
    {"cuGraphInstantiateWithParams", 12000, addr(&::cuGraphInstantiateWithParams), nullptr, 0,
     addr(&::cuGraphInstantiateWithParams_ptsz)},
    {"cuGraphExecDestroy", 10000, addr(&::cuGraphExecDestroy), nullptr, 0, nullptr},
    {"cuGraphLaunch", 10000, addr(&::cuGraphLaunch), nullptr, 0, addr(&::cuGraphLaunch_ptsz)},
    {"cuDeviceGraphMemTrim", 11040, addr(&::cuDeviceGraphMemTrim), nullptr, 0, nullptr},
    {"cuDeviceGetGraphMemAttribute", 11040, addr(&::cuDeviceGetGraphMemAttribute), nullptr, 0,
     nullptr},
    // The fake has no pre-10.1 capture forms: the first ABI it hands out is the current one.
    {"cuStreamBeginCapture", 10010, addr(&::cuStreamBeginCapture_v2), nullptr, 0,
     addr(&::cuStreamBeginCapture_v2_ptsz)},
    {"cuStreamBeginCaptureToGraph", 12030, addr(&::cuStreamBeginCaptureToGraph), nullptr, 0,
     nullptr},
    {"cuStreamEndCapture", 10000, addr(&::cuStreamEndCapture), nullptr, 0,
     addr(&::cuStreamEndCapture_ptsz)},
    {"cuStreamGetCaptureInfo", 11030, addr(&::cuStreamGetCaptureInfo_v2),
     addr(&::cuStreamGetCaptureInfo_v3), 12030, nullptr},
    {"cuIpcGetMemHandle", 4010, addr(&::cuIpcGetMemHandle), nullptr, 0, nullptr},
    {"cuIpcOpenMemHandle", 11000, addr(&::cuIpcOpenMemHandle_v2), nullptr, 0, nullptr},
    {"cuIpcCloseMemHandle", 4010, addr(&::cuIpcCloseMemHandle), nullptr, 0, nullptr},
    {"cuMemGetAddressRange", 3020, addr(&::cuMemGetAddressRange_v2), nullptr, 0, nullptr},
    {"cuArrayCreate", 3020, addr(&::cuArrayCreate_v2), nullptr, 0, nullptr},
    {"cuArray3DCreate", 3020, addr(&::cuArray3DCreate_v2), nullptr, 0, nullptr},
    {"cuMipmappedArrayCreate", 5000, addr(&::cuMipmappedArrayCreate), nullptr, 0, nullptr},
    {"cuArrayDestroy", 2000, addr(&::cuArrayDestroy), nullptr, 0, nullptr},
    {"cuMipmappedArrayDestroy", 5000, addr(&::cuMipmappedArrayDestroy), nullptr, 0, nullptr},
    {"cuImportExternalMemory", 10000, addr(&::cuImportExternalMemory), nullptr, 0, nullptr},
    {"cuExternalMemoryGetMappedBuffer", 10000, addr(&::cuExternalMemoryGetMappedBuffer), nullptr, 0,
     nullptr},
    {"cuDestroyExternalMemory", 10000, addr(&::cuDestroyExternalMemory), nullptr, 0, nullptr},
    {"cuGetProcAddress", 11030, addr(&::cuGetProcAddress), addr(&::cuGetProcAddress_v2), 12000,
     nullptr},
};

struct ForcedError {
  std::string name;
  CUresult code;
};

// FAKE_CUDA_GPA_ERROR, parsed on first use and never destroyed.
const std::vector<ForcedError>& forced_errors() {
  static const auto* all = [] {
    auto* v = new std::vector<ForcedError>;
    const char* env = std::getenv("FAKE_CUDA_GPA_ERROR");
    std::string text = env ? env : "";
    size_t start = 0;
    while (start < text.size()) {
      size_t comma = text.find(',', start);
      if (comma == std::string::npos) comma = text.size();
      const std::string item = text.substr(start, comma - start);
      if (const size_t eq = item.find('='); eq != std::string::npos && eq > 0) {
        v->push_back({item.substr(0, eq),
                      static_cast<CUresult>(std::strtol(item.c_str() + eq + 1, nullptr, 10))});
      }
      start = comma + 1;
    }
    return v;
  }();
  return *all;
}

CUresult resolve(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags,
                 CUdriverProcAddressQueryResult* status) {
  constexpr cuuint64_t kKnownFlags =
      CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  if (!symbol || !pfn || (flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  auto fail = [status](CUdriverProcAddressQueryResult why) {
    if (status) *status = why;
    return CUDA_ERROR_NOT_FOUND;
  };
  for (const ForcedError& e : forced_errors()) {
    if (e.name == symbol) {
      if (status) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
      return e.code;
    }
  }
  if (symbol_missing(symbol)) return fail(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  for (const ProcEntry& e : kTable) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    if (cuda_version < e.introduced) return fail(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    void* fn = e.v2 && cuda_version >= e.v2_since ? e.v2 : e.fn;
    if (e.ptsz && (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) fn = e.ptsz;
    *pfn = fn;
    if (status) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  return fail(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

}  // namespace

}  // namespace cumemtrace::fake

FAKE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                         cuuint64_t flags,
                                         CUdriverProcAddressQueryResult* symbolStatus) {
  return cumemtrace::fake::resolve(symbol, pfn, cudaVersion, flags, symbolStatus);
}

FAKE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                      cuuint64_t flags) {
  return cumemtrace::fake::resolve(symbol, pfn, cudaVersion, flags, nullptr);
}
