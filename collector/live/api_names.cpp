#include "live/api_names.h"

#include "wire_format.h"

namespace cumemtrace::collect {

using wire::Api;

const char* api_name(uint8_t api) {
  switch (static_cast<Api>(api)) {
    case Api::kDevicePrimaryCtxRetain:
      return "cuDevicePrimaryCtxRetain";
    case Api::kCtxCreate:
      return "cuCtxCreate";
    case Api::kDevicePrimaryCtxRelease:
      return "cuDevicePrimaryCtxRelease";
    case Api::kDevicePrimaryCtxReset:
      return "cuDevicePrimaryCtxReset";
    case Api::kCtxDestroy:
      return "cuCtxDestroy";
    case Api::kMemAlloc:
      return "cuMemAlloc";
    case Api::kMemAllocPitch:
      return "cuMemAllocPitch";
    case Api::kMemAllocManaged:
      return "cuMemAllocManaged";
    case Api::kMemAllocAsync:
      return "cuMemAllocAsync";
    case Api::kMemAllocFromPoolAsync:
      return "cuMemAllocFromPoolAsync";
    case Api::kMemFree:
      return "cuMemFree";
    case Api::kMemFreeAsync:
      return "cuMemFreeAsync";
    case Api::kMemCreate:
      return "cuMemCreate";
    case Api::kMemRelease:
      return "cuMemRelease";
    case Api::kMemMap:
      return "cuMemMap";
    case Api::kMemUnmap:
      return "cuMemUnmap";
    case Api::kMemAddressReserve:
      return "cuMemAddressReserve";
    case Api::kMemAddressFree:
      return "cuMemAddressFree";
    case Api::kMemHostAlloc:
      return "cuMemHostAlloc";
    case Api::kMemAllocHost:
      return "cuMemAllocHost";
    case Api::kMemFreeHost:
      return "cuMemFreeHost";
    case Api::kMemRetainAllocationHandle:
      return "cuMemRetainAllocationHandle";
    case Api::kMemImportFromShareableHandle:
      return "cuMemImportFromShareableHandle";
    case Api::kGraphAddMemAllocNode:
      return "cuGraphAddMemAllocNode";
    case Api::kGraphAddMemFreeNode:
      return "cuGraphAddMemFreeNode";
    case Api::kGraphAddNode:
      return "cuGraphAddNode";
    case Api::kGraphInstantiate:
      return "cuGraphInstantiate";
    case Api::kGraphLaunch:
      return "cuGraphLaunch";
    case Api::kGraphDestroy:
      return "cuGraphDestroy";
    case Api::kGraphExecDestroy:
      return "cuGraphExecDestroy";
    case Api::kDeviceGraphMemTrim:
      return "cuDeviceGraphMemTrim";
    case Api::kIpcOpenMemHandle:
      return "cuIpcOpenMemHandle";
    case Api::kIpcCloseMemHandle:
      return "cuIpcCloseMemHandle";
    case Api::kArrayCreate:
      return "cuArrayCreate";
    case Api::kArray3DCreate:
      return "cuArray3DCreate";
    case Api::kMipmappedArrayCreate:
      return "cuMipmappedArrayCreate";
    case Api::kArrayDestroy:
      return "cuArrayDestroy";
    case Api::kMipmappedArrayDestroy:
      return "cuMipmappedArrayDestroy";
    case Api::kImportExternalMemory:
      return "cuImportExternalMemory";
    case Api::kDestroyExternalMemory:
      return "cuDestroyExternalMemory";
    case Api::kExternalMemoryGetMappedBuffer:
      return "cuExternalMemoryGetMappedBuffer";
    case Api::kNone:
      break;
  }
  return "unknown";
}

}  // namespace cumemtrace::collect
