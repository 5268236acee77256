#include "driver/real_driver.h"

#include <cuda.h>
#include <dlfcn.h>

#include <atomic>

namespace cumemtrace::preload {

DlsymFn real_dlsym() noexcept {
  static std::atomic<DlsymFn> cached{nullptr};
  DlsymFn fn = cached.load(std::memory_order_acquire);
  if (fn) return fn;
  // glibc >= 2.34 has dlsym in libc at GLIBC_2.34; older ones only at GLIBC_2.2.5.
  void* p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (!p) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  fn = reinterpret_cast<DlsymFn>(p);
  cached.store(fn, std::memory_order_release);
  return fn;
}

void* libcuda_handle() noexcept {
  static std::atomic<void*> cached{nullptr};
  void* h = cached.load(std::memory_order_acquire);
  if (h) return h;
  h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h) h = dlopen("libcuda.so.1", RTLD_NOW);
  if (h) cached.store(h, std::memory_order_release);
  return h;
}

void* driver_symbol(const char* name) noexcept {
  DlsymFn dl = real_dlsym();
  void* h = libcuda_handle();
  return dl && h ? dl(h, name) : nullptr;
}

namespace {

__attribute__((noinline)) void* resolve(std::atomic<void*>& slot, const char* name) noexcept {
  void* p = driver_symbol(name);
  slot.store(p, std::memory_order_release);
  return p;
}

// The driver function, looked up on first use (an inline load afterwards: current_device() runs
// on every allocation).
template <typename Fn>
inline Fn lazy(std::atomic<void*>& slot, const char* name) noexcept {
  void* p = slot.load(std::memory_order_acquire);
  return reinterpret_cast<Fn>(p ? p : resolve(slot, name));
}

std::atomic<void*> g_ctx_get_device{nullptr};
std::atomic<void*> g_pointer_get_attribute{nullptr};
std::atomic<void*> g_stream_get_device{nullptr};
std::atomic<void*> g_mem_get_info{nullptr};
std::atomic<void*> g_handle_props{nullptr};
std::atomic<void*> g_device_get{nullptr};
std::atomic<void*> g_device_get_pci_bus_id{nullptr};
std::atomic<void*> g_capture_info_v3{nullptr};
std::atomic<void*> g_capture_info_v2{nullptr};
std::atomic<void*> g_is_capturing{nullptr};
std::atomic<void*> g_graph_mem_attr{nullptr};
std::atomic<void*> g_address_range{nullptr};
std::atomic<void*> g_primary_ctx_state{nullptr};

CUstream as_stream(uint64_t stream, bool per_thread) {
  // The plain entry points read stream 0 as the legacy stream: name the per-thread one.
  return stream == 0 && per_thread ? CU_STREAM_PER_THREAD : reinterpret_cast<CUstream>(stream);
}
std::atomic<void*> g_device_get_mem_pool{nullptr};
std::atomic<void*> g_mem_pool_get_attribute{nullptr};

}  // namespace

int current_device() noexcept {
  auto fn = lazy<CUresult (*)(CUdevice*)>(g_ctx_get_device, "cuCtxGetDevice");
  CUdevice d = -1;
  if (!fn || fn(&d) != CUDA_SUCCESS) return -1;
  return d;
}

int stream_device(uint64_t stream) noexcept {
  // A driver before 12.8 has no cuStreamGetDevice: known after one lookup, not one per call
  // (lazy() looks a missing symbol up again every time).
  static std::atomic<bool> missing{false};
  if (missing.load(std::memory_order_relaxed)) return -1;
  auto fn = lazy<CUresult (*)(CUstream, CUdevice*)>(g_stream_get_device, "cuStreamGetDevice");
  if (!fn) {
    missing.store(true, std::memory_order_relaxed);
    return -1;
  }
  CUdevice d = -1;
  if (fn(reinterpret_cast<CUstream>(stream), &d) != CUDA_SUCCESS) return -1;
  return d;
}

int pointer_device(uint64_t dptr) noexcept {
  auto fn = lazy<CUresult (*)(void*, CUpointer_attribute, CUdeviceptr)>(g_pointer_get_attribute,
                                                                        "cuPointerGetAttribute");
  int ordinal = -1;
  if (!fn || fn(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr) != CUDA_SUCCESS) return -1;
  return ordinal;
}

bool device_pci_bus_id(int ordinal, char* buf, int len) noexcept {
  auto get = lazy<CUresult (*)(CUdevice*, int)>(g_device_get, "cuDeviceGet");
  auto bus =
      lazy<CUresult (*)(char*, int, CUdevice)>(g_device_get_pci_bus_id, "cuDeviceGetPCIBusId");
  CUdevice dev = 0;
  return get && bus && get(&dev, ordinal) == CUDA_SUCCESS && bus(buf, len, dev) == CUDA_SUCCESS;
}

int primary_ctx_active(int device) noexcept {
  auto fn = lazy<CUresult (*)(CUdevice, unsigned*, int*)>(g_primary_ctx_state,
                                                          "cuDevicePrimaryCtxGetState");
  unsigned flags = 0;
  int active = 0;
  if (!fn || fn(device, &flags, &active) != CUDA_SUCCESS) return -1;
  return active ? 1 : 0;
}

uint64_t device_free_bytes() noexcept {
  auto fn = lazy<CUresult (*)(size_t*, size_t*)>(g_mem_get_info, "cuMemGetInfo_v2");
  size_t free_b = 0, total = 0;
  if (!fn || fn(&free_b, &total) != CUDA_SUCCESS) return 0;
  return free_b;
}

uint64_t capturing_graph(uint64_t stream, bool per_thread) noexcept {
  const CUstream s = as_stream(stream, per_thread);
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph graph = nullptr;
  // _v3 since CUDA 12.3; drivers before it have _v2 (same first four parameters).
  using V3 = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*,
                          const CUgraphNode**, const CUgraphEdgeData**, size_t*);
  using V2 = CUresult (*)(CUstream, CUstreamCaptureStatus*, cuuint64_t*, CUgraph*,
                          const CUgraphNode**, size_t*);
  CUresult r = CUDA_ERROR_NOT_FOUND;
  if (auto v3 = lazy<V3>(g_capture_info_v3, "cuStreamGetCaptureInfo_v3")) {
    r = v3(s, &status, &id, &graph, nullptr, nullptr, nullptr);
  } else if (auto v2 = lazy<V2>(g_capture_info_v2, "cuStreamGetCaptureInfo_v2")) {
    r = v2(s, &status, &id, &graph, nullptr, nullptr);
  }
  if (r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return 0;
  return reinterpret_cast<uint64_t>(graph);
}

bool stream_capturing(uint64_t stream, bool per_thread) noexcept {
  auto fn =
      lazy<CUresult (*)(CUstream, CUstreamCaptureStatus*)>(g_is_capturing, "cuStreamIsCapturing");
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return fn && fn(as_stream(stream, per_thread), &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool graph_mem(int device, uint64_t* reserved, uint64_t* used) noexcept {
  auto fn = lazy<CUresult (*)(CUdevice, CUgraphMem_attribute, void*)>(
      g_graph_mem_attr, "cuDeviceGetGraphMemAttribute");
  cuuint64_t r = 0, u = 0;
  if (!fn || device < 0 || fn(device, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &r) != CUDA_SUCCESS ||
      fn(device, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &u) != CUDA_SUCCESS) {
    return false;
  }
  *reserved = r;
  *used = u;
  return true;
}

uint64_t allocation_size(uint64_t dptr) noexcept {
  auto fn = lazy<CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr)>(g_address_range,
                                                                   "cuMemGetAddressRange_v2");
  CUdeviceptr base = 0;
  size_t size = 0;
  if (!fn || fn(&base, &size, dptr) != CUDA_SUCCESS) return 0;
  return size;
}

int handle_device(uint64_t handle) noexcept {
  auto fn = lazy<CUresult (*)(CUmemAllocationProp*, CUmemGenericAllocationHandle)>(
      g_handle_props, "cuMemGetAllocationPropertiesFromHandle");
  CUmemAllocationProp prop{};
  if (!fn || fn(&prop, handle) != CUDA_SUCCESS) return -1;
  return prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop.location.id : -1;
}

bool pool_usage(int ordinal, uint64_t pool, uint64_t* pool_out, uint64_t* reserved,
                uint64_t* used) noexcept {
  auto get_attr = lazy<CUresult (*)(CUmemoryPool, CUmemPool_attribute, void*)>(
      g_mem_pool_get_attribute, "cuMemPoolGetAttribute");
  if (!get_attr) return false;
  CUmemoryPool p = reinterpret_cast<CUmemoryPool>(pool);
  if (!p) {
    auto get_pool =
        lazy<CUresult (*)(CUmemoryPool*, CUdevice)>(g_device_get_mem_pool, "cuDeviceGetMemPool");
    auto get_device = lazy<CUresult (*)(CUdevice*, int)>(g_device_get, "cuDeviceGet");
    CUdevice dev = 0;
    if (!get_pool || !get_device || get_device(&dev, ordinal) != CUDA_SUCCESS ||
        get_pool(&p, dev) != CUDA_SUCCESS || !p) {
      return false;
    }
  }
  cuuint64_t r = 0, u = 0;
  if (get_attr(p, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &r) != CUDA_SUCCESS ||
      get_attr(p, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &u) != CUDA_SUCCESS) {
    return false;
  }
  *pool_out = reinterpret_cast<uint64_t>(p);
  *reserved = r;
  *used = u;
  return true;
}

}  // namespace cumemtrace::preload
