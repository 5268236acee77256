// The exported memory hooks. Each calls the real driver function and records what happened:
// allocations after the real call returned (so the address exists), frees before the real call
// (so a reuse of the address by another thread is ordered after it). A failed free is followed by
// a kFreeFailed event that undoes it.
#include <cuda.h>

#include "core/event_clock.h"
#include "core/export.h"
#include "driver/real_driver.h"
#include "driver/stream_devices.h"
#include "hooks/alloc_outcome.h"
#include "hooks/graph_capture.h"
#include "hooks/hook_table.h"
#include "record/pool_sampler.h"
#include "record/recorder.h"

using cumemtrace::preload::after_alloc;
using cumemtrace::preload::EventArgs;
using cumemtrace::preload::HookId;
using cumemtrace::preload::real_fn;
using cumemtrace::preload::ReentryGuard;
using cumemtrace::preload::u64;
using cumemtrace::wire::Api;
using cumemtrace::wire::Kind;
namespace pl = cumemtrace::preload;

namespace {

// A pool allocation's outcome, with the pool sampled off the hot path (pool_sampler.h) before
// the allocation's own record: a pool grows inside the allocation call, so the sample holds the
// growth and precedes the entry it explains. Before an out-of-memory record too, so that the OOM
// snapshot has the pool's state. `device` is evaluated once, on success, as after_alloc would.
template <typename DeviceFn>
void record_pool_alloc(CUresult r, Api api, uint64_t pool, uint64_t addr, uint64_t size,
                       uint64_t stream, uint8_t flags, DeviceFn device) noexcept {
  if (r == CUDA_SUCCESS) {
    const int dev = device();
    // One clock read serves the sampler's interval and the event (pool_sampler.h).
    uint64_t now = pl::event_time();
    if (pl::after_pool_alloc(dev, pool, false, now)) now = pl::event_time();
    after_alloc(
        r, api, Kind::kAlloc, addr, size, stream, flags, [dev] { return dev; }, now);
    return;
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    pl::after_pool_alloc(pl::current_device(), pool, true, pl::event_time());
  }
  after_alloc(r, api, Kind::kAlloc, addr, size, stream, flags, device);
}

__attribute__((always_inline)) inline void before_free(Kind kind, Api api, uint64_t addr,
                                                       uint64_t stream, uint8_t flags) noexcept {
  pl::EventFields f{kind, api};
  f.addr = addr;
  f.stream = stream;
  f.flags = flags;
  pl::record_fields(f);
}

void after_free(CUresult r, Api api, uint64_t addr) noexcept {
  if (r == CUDA_SUCCESS) return;
  EventArgs a{Kind::kFreeFailed, api, static_cast<int32_t>(r)};
  a.addr = addr;
  pl::record(a);
}

constexpr uint8_t kPtsz = cumemtrace::wire::kFlagPerThreadStream;

CUresult alloc_async(HookId id, Api api, uint8_t flags, CUdeviceptr* dptr, size_t size,
                     CUstream s) noexcept {
  auto fn = real_fn<CUresult (*)(CUdeviceptr*, size_t, CUstream)>(id);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(dptr, size, s);
  if (g.outer && pl::tracing_possible()) {
    // On a capturing stream the call added an allocation node to the graph: no memory yet.
    if (const uint64_t graph = r == CUDA_SUCCESS ? pl::capture_graph(u64(s), flags & kPtsz) : 0) {
      pl::record_graph_alloc_node(static_cast<uint8_t>(api), graph, *dptr, size,
                                  pl::current_device());
      return r;
    }
    // The allocation comes from the pool of the stream's device, remembered per thread
    // (stream_devices.h): no driver call on a pool hit.
    record_pool_alloc(r, api, 0, dptr ? *dptr : 0, size, u64(s), flags,
                      [s] { return pl::async_stream_device(u64(s)); });
  }
  return r;
}

CUresult alloc_pool_async(HookId id, uint8_t flags, CUdeviceptr* dptr, size_t size,
                          CUmemoryPool pool, CUstream s) noexcept {
  auto fn = real_fn<CUresult (*)(CUdeviceptr*, size_t, CUmemoryPool, CUstream)>(id);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(dptr, size, pool, s);
  if (g.outer && pl::tracing_possible()) {
    if (const uint64_t graph = r == CUDA_SUCCESS ? pl::capture_graph(u64(s), flags & kPtsz) : 0) {
      // The graph's address may hold nothing the driver can describe before the launch.
      int device = pl::pointer_device(*dptr);
      if (device < 0) device = pl::current_device();
      pl::record_graph_alloc_node(static_cast<uint8_t>(Api::kMemAllocFromPoolAsync), graph, *dptr,
                                  size, device);
      return r;
    }
    record_pool_alloc(r, Api::kMemAllocFromPoolAsync, reinterpret_cast<uint64_t>(pool),
                      dptr ? *dptr : 0, size, u64(s), flags,
                      [&] { return pl::pointer_device(*dptr); });
  }
  return r;
}

CUresult free_async(HookId id, uint8_t flags, CUdeviceptr dptr, CUstream s) noexcept {
  auto fn = real_fn<CUresult (*)(CUdeviceptr, CUstream)>(id);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  const bool rec = g.outer && dptr != 0 && pl::tracing_possible();
  // On a capturing stream the call adds a free node to the graph and frees nothing now.
  if (const uint64_t graph = rec ? pl::capture_graph(u64(s), flags & kPtsz) : 0) {
    CUresult r = fn(dptr, s);
    if (r == CUDA_SUCCESS) {
      pl::record_graph_free_node(static_cast<uint8_t>(Api::kMemFreeAsync), graph, dptr);
    }
    return r;
  }
  if (rec) before_free(Kind::kFree, Api::kMemFreeAsync, dptr, u64(s), flags);
  CUresult r = fn(dptr, s);
  if (rec) after_free(r, Api::kMemFreeAsync, dptr);
  return r;
}

}  // namespace

CUMEMTRACE_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  auto fn = real_fn<CUresult (*)(CUdeviceptr*, size_t)>(HookId::k_cuMemAlloc_v2);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(dptr, bytesize);
  if (g.outer && pl::tracing_possible()) {
    after_alloc(r, Api::kMemAlloc, Kind::kAlloc, dptr ? *dptr : 0, bytesize, 0, 0,
                pl::current_device);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pitch, size_t width,
                                              size_t height, unsigned int elem) {
  auto fn = real_fn<CUresult (*)(CUdeviceptr*, size_t*, size_t, size_t, unsigned)>(
      HookId::k_cuMemAllocPitch_v2);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(dptr, pitch, width, height, elem);
  if (g.outer && pl::tracing_possible()) {
    const uint64_t size = r == CUDA_SUCCESS && pitch ? uint64_t{*pitch} * height : width * height;
    after_alloc(r, Api::kMemAllocPitch, Kind::kAlloc, dptr ? *dptr : 0, size, 0, 0,
                pl::current_device);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize,
                                             unsigned int flags) {
  auto fn = real_fn<CUresult (*)(CUdeviceptr*, size_t, unsigned)>(HookId::k_cuMemAllocManaged);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(dptr, bytesize, flags);
  if (g.outer && pl::tracing_possible()) {
    after_alloc(r, Api::kMemAllocManaged, Kind::kAlloc, dptr ? *dptr : 0, bytesize, 0, 0,
                pl::current_device);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr) {
  auto fn = real_fn<CUresult (*)(CUdeviceptr)>(HookId::k_cuMemFree_v2);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  const bool rec = g.outer && dptr != 0 && pl::tracing_possible();
  if (rec) before_free(Kind::kFree, Api::kMemFree, dptr, 0, 0);
  CUresult r = fn(dptr);
  if (rec) after_free(r, Api::kMemFree, dptr);
  return r;
}

CUMEMTRACE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t size, CUstream s) {
  return alloc_async(HookId::k_cuMemAllocAsync, Api::kMemAllocAsync, 0, dptr, size, s);
}
CUMEMTRACE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t size, CUstream s) {
  return alloc_async(HookId::k_cuMemAllocAsync_ptsz, Api::kMemAllocAsync, kPtsz, dptr, size, s);
}
CUMEMTRACE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t size,
                                                   CUmemoryPool pool, CUstream s) {
  return alloc_pool_async(HookId::k_cuMemAllocFromPoolAsync, 0, dptr, size, pool, s);
}
CUMEMTRACE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t size,
                                                        CUmemoryPool pool, CUstream s) {
  return alloc_pool_async(HookId::k_cuMemAllocFromPoolAsync_ptsz, kPtsz, dptr, size, pool, s);
}
CUMEMTRACE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
  return free_async(HookId::k_cuMemFreeAsync, 0, dptr, s);
}
CUMEMTRACE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  return free_async(HookId::k_cuMemFreeAsync_ptsz, kPtsz, dptr, s);
}

CUMEMTRACE_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                       const CUmemAllocationProp* prop, unsigned long long flags) {
  auto fn = real_fn<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                                 unsigned long long)>(HookId::k_cuMemCreate);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(handle, size, prop, flags);
  if (g.outer && pl::tracing_possible()) {
    // The device comes from the request, never from the thread's context (which NCCL's threads
    // may not have).
    const int device =
        prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : -1;
    after_alloc(r, Api::kMemCreate, Kind::kCreate, handle ? *handle : 0, size, 0, 0,
                [device] { return device; });
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  auto fn = real_fn<CUresult (*)(CUmemGenericAllocationHandle)>(HookId::k_cuMemRelease);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  const bool rec = g.outer && pl::tracing_possible();
  if (rec) before_free(Kind::kRelease, Api::kMemRelease, handle, 0, 0);
  CUresult r = fn(handle);
  if (rec) after_free(r, Api::kMemRelease, handle);
  return r;
}

// NCCL frees its buffers by retaining the handle from the address and releasing twice: the
// retain is one more reference, without which the second release looks like a stray one.
CUMEMTRACE_EXPORT CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle,
                                                       void* addr) {
  auto fn = real_fn<CUresult (*)(CUmemGenericAllocationHandle*, void*)>(
      HookId::k_cuMemRetainAllocationHandle);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(handle, addr);
  if (g.outer && r == CUDA_SUCCESS && handle && pl::tracing_possible()) {
    EventArgs a{Kind::kRetain, Api::kMemRetainAllocationHandle};
    a.addr = *handle;
    a.aux = reinterpret_cast<uint64_t>(addr);
    pl::record(a);
  }
  return r;
}

// A handle to memory another process allocated (NCCL peers, CUDA IPC over file descriptors): its
// mappings are visible here but owned there, so the collector counts no bytes for it.
CUMEMTRACE_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                          void* os_handle,
                                                          CUmemAllocationHandleType type) {
  auto fn = real_fn<CUresult (*)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType)>(
      HookId::k_cuMemImportFromShareableHandle);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(handle, os_handle, type);
  if (g.outer && r == CUDA_SUCCESS && handle && pl::tracing_possible()) {
    EventArgs a{Kind::kImport, Api::kMemImportFromShareableHandle};
    a.addr = *handle;
    a.device = pl::handle_device(*handle);
    pl::record(a);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                    CUmemGenericAllocationHandle handle, unsigned long long flags) {
  auto fn = real_fn<CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                                 unsigned long long)>(HookId::k_cuMemMap);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(ptr, size, offset, handle, flags);
  if (g.outer && r == CUDA_SUCCESS && pl::tracing_possible()) {
    EventArgs a{Kind::kMap, Api::kMemMap};
    a.addr = ptr;
    a.size = size;
    a.aux = handle;
    // A handle imported from another process (NCCL) was never created here: its device comes from
    // its own properties, which need no context.
    a.device = pl::handle_device(handle);
    pl::record(a);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
  auto fn = real_fn<CUresult (*)(CUdeviceptr, size_t)>(HookId::k_cuMemUnmap);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  const bool rec = g.outer && pl::tracing_possible();
  if (rec) {
    EventArgs a{Kind::kUnmap, Api::kMemUnmap};
    a.addr = ptr;
    a.size = size;
    pl::record(a);
  }
  CUresult r = fn(ptr, size);
  if (rec) after_free(r, Api::kMemUnmap, ptr);
  return r;
}

CUMEMTRACE_EXPORT CUresult cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                               CUdeviceptr addr, unsigned long long flags) {
  auto fn = real_fn<CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long)>(
      HookId::k_cuMemAddressReserve);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(ptr, size, alignment, addr, flags);
  if (g.outer && r == CUDA_SUCCESS && pl::tracing_possible()) {
    EventArgs a{Kind::kReserve, Api::kMemAddressReserve};
    a.addr = *ptr;
    a.size = size;
    pl::record(a);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  auto fn = real_fn<CUresult (*)(CUdeviceptr, size_t)>(HookId::k_cuMemAddressFree);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  const bool rec = g.outer && pl::tracing_possible();
  if (rec) {
    EventArgs a{Kind::kAddressFree, Api::kMemAddressFree};
    a.addr = ptr;
    a.size = size;
    pl::record(a);
  }
  CUresult r = fn(ptr, size);
  if (rec) after_free(r, Api::kMemAddressFree, ptr);
  return r;
}

CUMEMTRACE_EXPORT CUresult cuMemHostAlloc(void** pp, size_t bytesize, unsigned int flags) {
  auto fn = real_fn<CUresult (*)(void**, size_t, unsigned)>(HookId::k_cuMemHostAlloc);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(pp, bytesize, flags);
  if (g.outer && pl::tracing_possible()) {
    after_alloc(r, Api::kMemHostAlloc, Kind::kHostAlloc, pp ? reinterpret_cast<uint64_t>(*pp) : 0,
                bytesize, 0, 0, [] { return -1; });
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuMemAllocHost_v2(void** pp, size_t bytesize) {
  auto fn = real_fn<CUresult (*)(void**, size_t)>(HookId::k_cuMemAllocHost_v2);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(pp, bytesize);
  if (g.outer && pl::tracing_possible()) {
    after_alloc(r, Api::kMemAllocHost, Kind::kHostAlloc, pp ? reinterpret_cast<uint64_t>(*pp) : 0,
                bytesize, 0, 0, [] { return -1; });
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuMemFreeHost(void* p) {
  auto fn = real_fn<CUresult (*)(void*)>(HookId::k_cuMemFreeHost);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  const bool rec = g.outer && p && pl::tracing_possible();
  if (rec) before_free(Kind::kHostFree, Api::kMemFreeHost, reinterpret_cast<uint64_t>(p), 0, 0);
  CUresult r = fn(p);
  if (rec) after_free(r, Api::kMemFreeHost, reinterpret_cast<uint64_t>(p));
  return r;
}
