// Contract: the driver entry points the test scenarios call, one table for both ways a test
// program gets them: the scenario runner's Driver (scenarios.h) and the cuGetProcAddress
// loader's DriverEntryPoints (gpa_loader.h) extend it, so a program that loads the one hands it
// to the other by copying this part. Null: not offered.
#pragma once

#include <cuda.h>

#include <cstddef>

namespace cumemtrace::testprog {

struct DriverCalls {
  CUresult (*memAlloc)(CUdeviceptr*, size_t);
  CUresult (*memFree)(CUdeviceptr);
  CUresult (*memAllocPitch)(CUdeviceptr*, size_t*, size_t, size_t, unsigned int);
  CUresult (*memAllocManaged)(CUdeviceptr*, size_t, unsigned int);
  CUresult (*streamCreate)(CUstream*, unsigned int);
  CUresult (*streamDestroy)(CUstream);
  CUresult (*memAllocAsync)(CUdeviceptr*, size_t, CUstream);
  CUresult (*memFreeAsync)(CUdeviceptr, CUstream);
  CUresult (*memAllocAsyncPtsz)(CUdeviceptr*, size_t, CUstream);
  CUresult (*memFreeAsyncPtsz)(CUdeviceptr, CUstream);
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
  CUresult (*ctxCreate)(CUcontext*, CUctxCreateParams*, unsigned int, CUdevice);  // _v4 ABI
  CUresult (*ctxDestroy)(CUcontext);
  CUresult (*primaryCtxRelease)(CUdevice);
};

}  // namespace cumemtrace::testprog
