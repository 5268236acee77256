// Hooks for CUDA contexts: the memory a context costs on its device (its local memory, stacks,
// the driver's own tables) is never handed out by an allocation call, so the collector measures
// it from outside (NVML) at the moment the context appears. A creation is recorded only when a
// context the process did not have comes into being: cuCtxCreate always, a primary context
// retain only when cuDevicePrimaryCtxGetState said inactive before the call (every later retain
// only counts a reference). The record is published after the real call succeeded, and the
// thread waits (bounded) until the collector consumed it: its NVML reading then predates
// anything this thread allocates in the new context. A context's end is recorded after the call
// that ended it: the primary context's last release (inactive after the call) or a reset of an
// active one, and cuCtxDestroy; the thread waits for the collector there too, which reads the
// driver's figure without the context before the program goes on. None of this runs on an
// allocation's hot path.
#include <cuda.h>

#include "core/export.h"
#include "driver/real_driver.h"
#include "driver/stream_devices.h"
#include "hooks/hook_table.h"
#include "record/recorder.h"

using cumemtrace::preload::EventArgs;
using cumemtrace::preload::HookId;
using cumemtrace::preload::ReentryGuard;
using cumemtrace::preload::u64;
using cumemtrace::wire::Api;
using cumemtrace::wire::Kind;
namespace pl = cumemtrace::preload;

namespace {

void context_event(Kind kind, Api api, int device, CUcontext ctx) noexcept {
  EventArgs a{kind, api};
  a.device = device;
  a.aux = u64(ctx);
  pl::record(a);
}

// cuCtxCreate in all its ABIs: a new context every time it succeeds.
void created(bool outer, CUresult r, CUcontext* pctx, CUdevice dev) noexcept {
  if (outer && r == CUDA_SUCCESS && pctx && pl::tracing_possible()) {
    context_event(Kind::kContextCreated, Api::kCtxCreate, dev, *pctx);
  }
}

}  // namespace

CUMEMTRACE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  auto fn = pl::real_fn<CUresult (*)(CUcontext*, CUdevice)>(HookId::k_cuDevicePrimaryCtxRetain);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  const bool watch = g.outer && pctx && pl::tracing_possible();
  const bool was_inactive = watch && pl::primary_ctx_active(dev) == 0;
  CUresult r = fn(pctx, dev);
  if (was_inactive && r == CUDA_SUCCESS) {
    context_event(Kind::kContextCreated, Api::kDevicePrimaryCtxRetain, dev, *pctx);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  auto fn = pl::real_fn<CUresult (*)(CUdevice)>(HookId::k_cuDevicePrimaryCtxRelease_v2);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  pl::streams_changed();  // the last release destroys the context and its streams
  CUresult r = fn(dev);
  // A successful release of an active context that leaves it inactive was its last reference.
  if (g.outer && r == CUDA_SUCCESS && pl::tracing_possible() && pl::primary_ctx_active(dev) == 0) {
    context_event(Kind::kContextDestroyed, Api::kDevicePrimaryCtxRelease, dev, nullptr);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  auto fn = pl::real_fn<CUresult (*)(CUdevice)>(HookId::k_cuDevicePrimaryCtxReset_v2);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  pl::streams_changed();  // a reset destroys the context's streams
  const bool was_active = g.outer && pl::tracing_possible() && pl::primary_ctx_active(dev) == 1;
  CUresult r = fn(dev);
  if (was_active && r == CUDA_SUCCESS) {
    context_event(Kind::kContextDestroyed, Api::kDevicePrimaryCtxReset, dev, nullptr);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  auto fn = pl::real_fn<CUresult (*)(CUcontext*, unsigned, CUdevice)>(HookId::k_cuCtxCreate_v2);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(pctx, flags, dev);
  created(g.outer, r, pctx, dev);
  return r;
}

CUMEMTRACE_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params,
                                          int num_params, unsigned int flags, CUdevice dev) {
  auto fn = pl::real_fn<CUresult (*)(CUcontext*, CUexecAffinityParam*, int, unsigned, CUdevice)>(
      HookId::k_cuCtxCreate_v3);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(pctx, params, num_params, flags, dev);
  created(g.outer, r, pctx, dev);
  return r;
}

CUMEMTRACE_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params,
                                          unsigned int flags, CUdevice dev) {
  auto fn = pl::real_fn<CUresult (*)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice)>(
      HookId::k_cuCtxCreate_v4);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(pctx, params, flags, dev);
  created(g.outer, r, pctx, dev);
  return r;
}

CUMEMTRACE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  auto fn = pl::real_fn<CUresult (*)(CUcontext)>(HookId::k_cuCtxDestroy_v2);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  pl::streams_changed();  // a context's streams die with it
  CUresult r = fn(ctx);
  if (g.outer && r == CUDA_SUCCESS && ctx && pl::tracing_possible()) {
    context_event(Kind::kContextDestroyed, Api::kCtxDestroy, -1, ctx);
  }
  return r;
}
