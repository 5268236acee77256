// Contract: how cudart (static and shared alike) reaches the driver, reproduced for the test
// programs: dlopen("libcuda.so.1", RTLD_NOW), dlsym(handle, "cuGetProcAddress_v2"), then every
// entry point through cuGetProcAddress_v2(base name, &fn, version, flags, &status), with the
// versions and flags cudart 13 uses (cuda-interposition.md §1.1). A name the driver reports as
// not found gets a stand-in that returns CUDA_ERROR_NOT_FOUND, as cudart fails only the calls
// that need it; after a successful load no entry is null.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace cumemtrace::testprog {

struct DriverEntryPoints {
  CUresult (*init)(unsigned int);
  CUresult (*deviceGet)(CUdevice*, int);
  CUresult (*primaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*ctxSetCurrent)(CUcontext);
  CUresult (*ctxGetCurrent)(CUcontext*);
  CUresult (*memGetInfo)(size_t*, size_t*);
  CUresult (*memAlloc)(CUdeviceptr*, size_t);
  CUresult (*memFree)(CUdeviceptr);
  CUresult (*memAllocPitch)(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
  CUresult (*memAllocManaged)(CUdeviceptr*, size_t, unsigned int);
  CUresult (*streamCreate)(CUstream*, unsigned int);
  CUresult (*streamDestroy)(CUstream);
  CUresult (*memAllocAsync)(CUdeviceptr*, size_t, CUstream);
  CUresult (*memAllocAsyncPtsz)(CUdeviceptr*, size_t, CUstream);
  CUresult (*memAllocFromPoolAsync)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
  CUresult (*memAllocFromPoolAsyncPtsz)(CUdeviceptr*, size_t, CUmemoryPool, CUstream);
  CUresult (*memFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*memFreeAsyncPtsz)(CUdeviceptr, CUstream);
  CUresult (*memPoolCreate)(CUmemoryPool*, const CUmemPoolProps*);
  CUresult (*deviceGetMemPool)(CUmemoryPool*, CUdevice);
  CUresult (*memPoolTrimTo)(CUmemoryPool, size_t);
  CUresult (*memGetAllocationGranularity)(size_t*, const CUmemAllocationProp*,
                                          CUmemAllocationGranularity_flags);
  CUresult (*memAddressReserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long);
  CUresult (*memAddressFree)(CUdeviceptr, size_t);
  CUresult (*memCreate)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                        unsigned long long);
  CUresult (*memRelease)(CUmemGenericAllocationHandle);
  CUresult (*memRetainAllocationHandle)(CUmemGenericAllocationHandle*, void*);
  CUresult (*memExportToShareableHandle)(void*, CUmemGenericAllocationHandle,
                                         CUmemAllocationHandleType, unsigned long long);
  CUresult (*memImportFromShareableHandle)(CUmemGenericAllocationHandle*, void*,
                                           CUmemAllocationHandleType);
  CUresult (*memMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
  CUresult (*memUnmap)(CUdeviceptr, size_t);
  CUresult (*memSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t);
  CUresult (*memHostAlloc)(void**, size_t, unsigned int);
  CUresult (*memAllocHost)(void**, size_t);
  CUresult (*memFreeHost)(void*);
  CUresult (*graphCreate)(CUgraph*, unsigned int);
  CUresult (*graphDestroy)(CUgraph);
  CUresult (*graphAddMemAllocNode)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                                   CUDA_MEM_ALLOC_NODE_PARAMS*);
  CUresult (*graphAddMemFreeNode)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUdeviceptr);
  CUresult (*graphAddNode)(CUgraphNode*, CUgraph, const CUgraphNode*, const CUgraphEdgeData*,
                           size_t, CUgraphNodeParams*);
  CUresult (*graphInstantiate)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*graphExecDestroy)(CUgraphExec);
  CUresult (*graphLaunch)(CUgraphExec, CUstream);
  CUresult (*streamBeginCapture)(CUstream, CUstreamCaptureMode);
  CUresult (*streamEndCapture)(CUstream, CUgraph*);
  CUresult (*deviceGraphMemTrim)(CUdevice);
  CUresult (*ipcGetMemHandle)(CUipcMemHandle*, CUdeviceptr);
  CUresult (*ipcOpenMemHandle)(CUdeviceptr*, CUipcMemHandle, unsigned int);
  CUresult (*ipcCloseMemHandle)(CUdeviceptr);
  CUresult (*arrayCreate)(CUarray*, const CUDA_ARRAY_DESCRIPTOR*);
  CUresult (*array3DCreate)(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*);
  CUresult (*mipmappedArrayCreate)(CUmipmappedArray*, const CUDA_ARRAY3D_DESCRIPTOR*, unsigned);
  CUresult (*arrayDestroy)(CUarray);
  CUresult (*mipmappedArrayDestroy)(CUmipmappedArray);
  CUresult (*importExternalMemory)(CUexternalMemory*, const CUDA_EXTERNAL_MEMORY_HANDLE_DESC*);
  CUresult (*externalMemoryGetMappedBuffer)(CUdeviceptr*, CUexternalMemory,
                                            const CUDA_EXTERNAL_MEMORY_BUFFER_DESC*);
  CUresult (*destroyExternalMemory)(CUexternalMemory);
};

// Fills `out`; false (reason on stderr) if the driver, its cuGetProcAddress_v2, or a lookup
// fails for any reason other than the name being unknown to the driver.
bool load_driver_entry_points(DriverEntryPoints* out);

}  // namespace cumemtrace::testprog
