// Contract: behaves like a program linked with -lcuda: every driver call binds at load time to
// the exported versioned symbols (cuda.h maps cuMemAlloc to cuMemAlloc_v2, ...), so a preload
// that exports the same names sees them without any dlsym or cuGetProcAddress. Offers every
// scenario.
#include <cuda.h>

#include "scenarios.h"

// Exported by the driver but declared by cuda.h only for per-thread-default-stream builds.
extern "C" CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream);
extern "C" CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);

namespace cumemtrace::testprog {
namespace {

CUresult init() {
  return cuInit(0);
}

CUresult set_device(int ordinal) {
  CUdevice device = 0;
  CUresult r = cuDeviceGet(&device, ordinal);
  if (r != CUDA_SUCCESS) return r;
  CUcontext ctx = nullptr;
  r = cuDevicePrimaryCtxRetain(&ctx, device);
  if (r != CUDA_SUCCESS) return r;
  return cuCtxSetCurrent(ctx);
}

Driver table() {
  Driver d{};
  d.init = init;
  d.setDevice = set_device;
  d.memAlloc = cuMemAlloc;
  d.memFree = cuMemFree;
  d.memAllocPitch = cuMemAllocPitch;
  d.memAllocManaged = cuMemAllocManaged;
  d.streamCreate = cuStreamCreate;
  d.streamDestroy = cuStreamDestroy;
  d.memAllocAsync = cuMemAllocAsync;
  d.memFreeAsync = cuMemFreeAsync;
  d.memAllocAsyncPtsz = cuMemAllocAsync_ptsz;
  d.memFreeAsyncPtsz = cuMemFreeAsync_ptsz;
  d.memGetAllocationGranularity = cuMemGetAllocationGranularity;
  d.memAddressReserve = cuMemAddressReserve;
  d.memAddressFree = cuMemAddressFree;
  d.memCreate = cuMemCreate;
  d.memRelease = cuMemRelease;
  d.memRetainAllocationHandle = cuMemRetainAllocationHandle;
  d.memExportToShareableHandle = cuMemExportToShareableHandle;
  d.memImportFromShareableHandle = cuMemImportFromShareableHandle;
  d.memMap = cuMemMap;
  d.memUnmap = cuMemUnmap;
  d.memSetAccess = cuMemSetAccess;
  d.memHostAlloc = cuMemHostAlloc;
  d.memAllocHost = cuMemAllocHost;
  d.memFreeHost = cuMemFreeHost;
  d.graphCreate = cuGraphCreate;
  d.graphDestroy = cuGraphDestroy;
  d.graphAddMemAllocNode = cuGraphAddMemAllocNode;
  d.graphAddMemFreeNode = cuGraphAddMemFreeNode;
  d.graphAddNode = cuGraphAddNode_v2;
  d.graphInstantiate = cuGraphInstantiateWithFlags;
  d.graphExecDestroy = cuGraphExecDestroy;
  d.graphLaunch = cuGraphLaunch;
  d.streamBeginCapture = cuStreamBeginCapture_v2;
  d.streamEndCapture = cuStreamEndCapture;
  d.deviceGraphMemTrim = cuDeviceGraphMemTrim;
  d.ipcGetMemHandle = cuIpcGetMemHandle;
  d.ipcOpenMemHandle = cuIpcOpenMemHandle_v2;
  d.ipcCloseMemHandle = cuIpcCloseMemHandle;
  d.arrayCreate = cuArrayCreate_v2;
  d.array3DCreate = cuArray3DCreate_v2;
  d.mipmappedArrayCreate = cuMipmappedArrayCreate;
  d.arrayDestroy = cuArrayDestroy;
  d.mipmappedArrayDestroy = cuMipmappedArrayDestroy;
  d.importExternalMemory = cuImportExternalMemory;
  d.externalMemoryGetMappedBuffer = cuExternalMemoryGetMappedBuffer;
  d.destroyExternalMemory = cuDestroyExternalMemory;
  d.ctxCreate = cuCtxCreate;
  d.ctxDestroy = cuCtxDestroy;
  d.primaryCtxRelease = cuDevicePrimaryCtxRelease;
  return d;
}

}  // namespace
}  // namespace cumemtrace::testprog

int main(int argc, char** argv) {
  return cumemtrace::testprog::run_scenario(cumemtrace::testprog::table(), argc, argv);
}
