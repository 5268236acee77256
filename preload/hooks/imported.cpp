// Hooks for memory another process owns and this one maps: CUDA IPC (cuIpcOpenMemHandle /
// cuIpcCloseMemHandle). The collector lists such mappings as imported (never this process's
// allocations, never leaks). An open is recorded after it succeeded (its size read with
// cuMemGetAddressRange, the opening context being current), a close before the real call, so
// that a reuse of the address is ordered after it.
#include <cuda.h>

#include "core/export.h"
#include "driver/real_driver.h"
#include "hooks/hook_table.h"
#include "record/recorder.h"

using cumemtrace::preload::EventArgs;
using cumemtrace::preload::HookId;
using cumemtrace::preload::ReentryGuard;
using cumemtrace::wire::Api;
using cumemtrace::wire::Kind;
namespace pl = cumemtrace::preload;

CUMEMTRACE_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* dptr, CUipcMemHandle handle,
                                                 unsigned int flags) {
  auto fn = pl::real_fn<CUresult (*)(CUdeviceptr*, CUipcMemHandle, unsigned)>(
      HookId::k_cuIpcOpenMemHandle_v2);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(dptr, handle, flags);
  if (g.outer && r == CUDA_SUCCESS && dptr && pl::tracing_possible()) {
    EventArgs a{Kind::kMapImported, Api::kIpcOpenMemHandle};
    a.addr = *dptr;
    a.size = pl::allocation_size(*dptr);
    a.device = pl::current_device();
    pl::record(a);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  auto fn = pl::real_fn<CUresult (*)(CUdeviceptr)>(HookId::k_cuIpcCloseMemHandle);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  const bool rec = g.outer && dptr != 0 && pl::tracing_possible();
  if (rec) {
    EventArgs a{Kind::kUnmapImported, Api::kIpcCloseMemHandle};
    a.addr = dptr;
    pl::record(a);
  }
  CUresult r = fn(dptr);
  if (rec && r != CUDA_SUCCESS) {
    EventArgs a{Kind::kFreeFailed, Api::kIpcCloseMemHandle, static_cast<int32_t>(r)};
    a.addr = dptr;
    pl::record(a);
  }
  return r;
}
