// Contract: declarations shared by the fake driver's translation units. cuda.h gives the CUDA 13
// signatures of every versioned export; the driver's other exports (the pre-3.2 32-bit ABI
// behind the base names, and the per-thread-default-stream `_ptsz` variants) are declared here,
// since cuda.h only declares them when building the real driver. symbol_missing() answers for
// FAKE_CUDA_MISSING, which cuGetProcAddress consults before cuInit has run.
#pragma once

#include <cuda.h>

// cuda.h maps these base names to their versioned ABIs; the fake also exports the base names
// themselves with their original signatures, so the macros must go.
#undef cuMemAlloc
#undef cuMemAllocPitch
#undef cuMemFree
#undef cuMemGetInfo
#undef cuMemAllocHost
#undef cuStreamDestroy
#undef cuDevicePrimaryCtxRelease
#undef cuGetProcAddress
#undef cuStreamBeginCapture
#undef cuStreamGetCaptureInfo
#undef cuGraphAddNode
#undef cuGraphInstantiate
#undef cuArrayCreate
#undef cuArray3DCreate

extern "C" {

// The CUDA 2.x/3.0 ABI (32-bit CUdeviceptr and sizes), as cuda.h declares it for the driver.
using CUdeviceptr_v1 = unsigned int;
CUresult cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize);
CUresult cuMemAllocPitch(CUdeviceptr_v1* dptr, unsigned int* pPitch, unsigned int WidthInBytes,
                         unsigned int Height, unsigned int ElementSizeBytes);
CUresult cuMemFree(CUdeviceptr_v1 dptr);
CUresult cuMemGetInfo(unsigned int* free, unsigned int* total);
CUresult cuMemAllocHost(void** pp, unsigned int bytesize);
CUresult cuStreamDestroy(CUstream hStream);
CUresult cuDevicePrimaryCtxRelease(CUdevice dev);
// The CUDA 11.3-11.8 form, without symbolStatus.
CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags);

CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                      CUstream hStream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus* captureStatus);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph);
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams);
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                   cuuint64_t* id_out, CUgraph* graph_out,
                                   const CUgraphNode** dependencies_out,
                                   size_t* numDependencies_out);
// cuda.h maps cuCtxCreate to _v4 and declares the older ABIs for the driver's own build only.
CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                        unsigned int flags, CUdevice dev);
CUresult cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                        size_t numDependencies, CUgraphNodeParams* nodeParams);

}  // extern "C"

namespace cumemtrace::fake {

// True when FAKE_CUDA_MISSING lists `base_name` (comma-separated base names, read once).
bool symbol_missing(const char* base_name) noexcept;

}  // namespace cumemtrace::fake
