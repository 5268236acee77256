// Contract: behaves like a program linked with static cudart: it never links libcuda, reaches
// the driver only through dlopen + dlsym("cuGetProcAddress_v2") + cuGetProcAddress_v2 lookups
// (gpa_loader.h), and calls the returned pointers directly. Runs every scenario.
#include "gpa_loader.h"
#include "scenarios.h"

namespace cumemtrace::testprog {
namespace {

DriverEntryPoints g_driver;

CUresult init() {
  return g_driver.init(0);
}

CUresult set_device(int ordinal) {
  CUdevice device = 0;
  CUresult r = g_driver.deviceGet(&device, ordinal);
  if (r != CUDA_SUCCESS) return r;
  CUcontext ctx = nullptr;
  r = g_driver.primaryCtxRetain(&ctx, device);
  if (r != CUDA_SUCCESS) return r;
  return g_driver.ctxSetCurrent(ctx);
}

Driver table() {
  const DriverEntryPoints& e = g_driver;
  Driver d{};
  d.init = init;
  d.setDevice = set_device;
  d.memAlloc = e.memAlloc;
  d.memFree = e.memFree;
  d.memAllocPitch = e.memAllocPitch;
  d.memAllocManaged = e.memAllocManaged;
  d.streamCreate = e.streamCreate;
  d.memAllocAsync = e.memAllocAsync;
  d.memFreeAsync = e.memFreeAsync;
  d.memAllocAsyncPtsz = e.memAllocAsyncPtsz;
  d.memFreeAsyncPtsz = e.memFreeAsyncPtsz;
  d.memGetAllocationGranularity = e.memGetAllocationGranularity;
  d.memAddressReserve = e.memAddressReserve;
  d.memAddressFree = e.memAddressFree;
  d.memCreate = e.memCreate;
  d.memRelease = e.memRelease;
  d.memRetainAllocationHandle = e.memRetainAllocationHandle;
  d.memExportToShareableHandle = e.memExportToShareableHandle;
  d.memImportFromShareableHandle = e.memImportFromShareableHandle;
  d.memMap = e.memMap;
  d.memUnmap = e.memUnmap;
  d.memSetAccess = e.memSetAccess;
  d.memHostAlloc = e.memHostAlloc;
  d.memAllocHost = e.memAllocHost;
  d.memFreeHost = e.memFreeHost;
  d.graphCreate = e.graphCreate;
  d.graphDestroy = e.graphDestroy;
  d.graphAddMemAllocNode = e.graphAddMemAllocNode;
  d.graphAddMemFreeNode = e.graphAddMemFreeNode;
  d.graphAddNode = e.graphAddNode;
  d.graphInstantiate = e.graphInstantiate;
  d.graphExecDestroy = e.graphExecDestroy;
  d.graphLaunch = e.graphLaunch;
  d.streamBeginCapture = e.streamBeginCapture;
  d.streamEndCapture = e.streamEndCapture;
  d.deviceGraphMemTrim = e.deviceGraphMemTrim;
  d.ipcGetMemHandle = e.ipcGetMemHandle;
  d.ipcOpenMemHandle = e.ipcOpenMemHandle;
  d.ipcCloseMemHandle = e.ipcCloseMemHandle;
  d.arrayCreate = e.arrayCreate;
  d.array3DCreate = e.array3DCreate;
  d.mipmappedArrayCreate = e.mipmappedArrayCreate;
  d.arrayDestroy = e.arrayDestroy;
  d.mipmappedArrayDestroy = e.mipmappedArrayDestroy;
  d.importExternalMemory = e.importExternalMemory;
  d.externalMemoryGetMappedBuffer = e.externalMemoryGetMappedBuffer;
  d.destroyExternalMemory = e.destroyExternalMemory;
  return d;
}

}  // namespace
}  // namespace cumemtrace::testprog

int main(int argc, char** argv) {
  namespace tp = cumemtrace::testprog;
  if (!tp::load_driver_entry_points(&tp::g_driver)) return 3;
  return tp::run_scenario(tp::table(), argc, argv);
}
