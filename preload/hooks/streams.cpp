// The stream hooks: nothing is recorded, but a destroyed stream's handle may come back as another
// stream's, on another device, so the devices remembered per stream are forgotten first
// (stream_devices.h). cuStreamDestroy is the CUDA 2.0 ABI name, cuStreamDestroy_v2 the 4.0 one
// (the same signature).
#include <cuda.h>

#include "core/export.h"
#include "driver/stream_devices.h"
#include "hooks/hook_table.h"

// cuda.h maps the base name to the _v2 ABI; the hooks below are the exact ABIs.
#undef cuStreamDestroy

using cumemtrace::preload::HookId;
using cumemtrace::preload::real_fn;

namespace {

CUresult destroy(HookId id, CUstream s) noexcept {
  auto fn = real_fn<CUresult (*)(CUstream)>(id);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  cumemtrace::preload::streams_changed();
  return fn(s);
}

}  // namespace

CUMEMTRACE_EXPORT CUresult cuStreamDestroy(CUstream s) {
  return destroy(HookId::k_cuStreamDestroy, s);
}
CUMEMTRACE_EXPORT CUresult cuStreamDestroy_v2(CUstream s) {
  return destroy(HookId::k_cuStreamDestroy_v2, s);
}
