// Contract: see ct_fakecudart.h.
#include "ct_fakecudart.h"

#include <mutex>

#include "gpa_loader.h"

namespace cumemtrace::testprog {
namespace {

struct Runtime {
  DriverEntryPoints driver{};
  CUresult status = CUDA_ERROR_NOT_INITIALIZED;
};

const Runtime& runtime() {
  static Runtime rt;
  static std::once_flag once;
  std::call_once(once, [] {
    if (!load_driver_entry_points(&rt.driver)) return;
    rt.status = rt.driver.init(0);
  });
  return rt;
}

// The driver, once it is up; nullptr (with the reason in *status) otherwise.
const DriverEntryPoints* driver(CUresult* status) {
  const Runtime& rt = runtime();
  *status = rt.status;
  return rt.status == CUDA_SUCCESS ? &rt.driver : nullptr;
}

CUresult set_device(const DriverEntryPoints& d, int ordinal) {
  CUdevice device = 0;
  CUresult r = d.deviceGet(&device, ordinal);
  if (r != CUDA_SUCCESS) return r;
  CUcontext ctx = nullptr;
  r = d.primaryCtxRetain(&ctx, device);
  if (r != CUDA_SUCCESS) return r;
  return d.ctxSetCurrent(ctx);
}

// The driver with a current context on this thread (device 0's unless one was chosen).
const DriverEntryPoints* driver_with_context(CUresult* status) {
  const DriverEntryPoints* d = driver(status);
  if (!d) return nullptr;
  CUcontext current = nullptr;
  *status = d->ctxGetCurrent(&current);
  if (*status == CUDA_SUCCESS && !current) *status = set_device(*d, 0);
  return *status == CUDA_SUCCESS ? d : nullptr;
}

ctError_t to_pointer(CUresult r, CUdeviceptr p, void** out) {
  if (r == CUDA_SUCCESS) *out = reinterpret_cast<void*>(p);
  return r;
}

}  // namespace
}  // namespace cumemtrace::testprog

namespace tp = cumemtrace::testprog;

ctError_t ctInit(void) {
  CUresult r = CUDA_SUCCESS;
  tp::driver(&r);
  return r;
}

ctError_t ctSetDevice(int device) {
  CUresult r = CUDA_SUCCESS;
  const tp::DriverEntryPoints* d = tp::driver(&r);
  return d ? tp::set_device(*d, device) : r;
}

ctError_t ctMalloc(void** devPtr, size_t size) {
  if (!devPtr) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_SUCCESS;
  const tp::DriverEntryPoints* d = tp::driver_with_context(&r);
  if (!d) return r;
  CUdeviceptr p = 0;
  const CUresult status = d->memAlloc(&p, size);
  return tp::to_pointer(status, p, devPtr);
}

ctError_t ctFree(void* devPtr) {
  if (!devPtr) return CUDA_SUCCESS;
  CUresult r = CUDA_SUCCESS;
  const tp::DriverEntryPoints* d = tp::driver_with_context(&r);
  return d ? d->memFree(reinterpret_cast<CUdeviceptr>(devPtr)) : r;
}

ctError_t ctStreamCreate(CUstream* stream) {
  CUresult r = CUDA_SUCCESS;
  const tp::DriverEntryPoints* d = tp::driver_with_context(&r);
  return d ? d->streamCreate(stream, CU_STREAM_DEFAULT) : r;
}

ctError_t ctMallocAsync(void** devPtr, size_t size, CUstream stream) {
  if (!devPtr) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_SUCCESS;
  const tp::DriverEntryPoints* d = tp::driver_with_context(&r);
  if (!d) return r;
  CUdeviceptr p = 0;
  const CUresult status = d->memAllocAsync(&p, size, stream);
  return tp::to_pointer(status, p, devPtr);
}

ctError_t ctFreeAsync(void* devPtr, CUstream stream) {
  CUresult r = CUDA_SUCCESS;
  const tp::DriverEntryPoints* d = tp::driver_with_context(&r);
  return d ? d->memFreeAsync(reinterpret_cast<CUdeviceptr>(devPtr), stream) : r;
}

ctError_t ctMallocAsync_ptsz(void** devPtr, size_t size, CUstream stream) {
  if (!devPtr) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_SUCCESS;
  const tp::DriverEntryPoints* d = tp::driver_with_context(&r);
  if (!d) return r;
  CUdeviceptr p = 0;
  const CUresult status = d->memAllocAsyncPtsz(&p, size, stream);
  return tp::to_pointer(status, p, devPtr);
}

ctError_t ctFreeAsync_ptsz(void* devPtr, CUstream stream) {
  CUresult r = CUDA_SUCCESS;
  const tp::DriverEntryPoints* d = tp::driver_with_context(&r);
  return d ? d->memFreeAsyncPtsz(reinterpret_cast<CUdeviceptr>(devPtr), stream) : r;
}
