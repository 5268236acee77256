// Contract: the driver entry points cumemtrace interposes, by their exact ABI names. Each has an
// exported hook of that name (for programs linked with -lcuda) and is also handed out in place
// of the real pointer by the dlsym / cuGetProcAddress wrappers: route() maps a real driver
// pointer to the hook with exactly that ABI (by pointer identity, so `_v2` and `_ptsz` variants
// never get mixed up) and returns any other pointer unchanged. real() gives the driver's own
// function for a hook.
#pragma once

#include <atomic>
#include <cstddef>

namespace cumemtrace::preload {

#define CUMEMTRACE_HOOKS(X)            \
  X(cuMemAlloc_v2)                     \
  X(cuMemAllocPitch_v2)                \
  X(cuMemAllocManaged)                 \
  X(cuMemFree_v2)                      \
  X(cuMemAllocAsync)                   \
  X(cuMemAllocAsync_ptsz)              \
  X(cuMemAllocFromPoolAsync)           \
  X(cuMemAllocFromPoolAsync_ptsz)      \
  X(cuMemFreeAsync)                    \
  X(cuMemFreeAsync_ptsz)               \
  X(cuMemCreate)                       \
  X(cuMemRelease)                      \
  X(cuMemRetainAllocationHandle)       \
  X(cuMemImportFromShareableHandle)    \
  X(cuMemMap)                          \
  X(cuMemUnmap)                        \
  X(cuMemAddressReserve)               \
  X(cuMemAddressFree)                  \
  X(cuMemHostAlloc)                    \
  X(cuMemAllocHost_v2)                 \
  X(cuMemFreeHost)                     \
  X(cuGraphAddMemAllocNode)            \
  X(cuGraphAddMemFreeNode)             \
  X(cuGraphAddNode)                    \
  X(cuGraphAddNode_v2)                 \
  X(cuGraphInstantiateWithFlags)       \
  X(cuGraphInstantiate)                \
  X(cuGraphInstantiate_v2)             \
  X(cuGraphInstantiateWithParams)      \
  X(cuGraphInstantiateWithParams_ptsz) \
  X(cuGraphLaunch)                     \
  X(cuGraphLaunch_ptsz)                \
  X(cuGraphDestroy)                    \
  X(cuGraphExecDestroy)                \
  X(cuDeviceGraphMemTrim)              \
  X(cuStreamBeginCapture)              \
  X(cuStreamBeginCapture_ptsz)         \
  X(cuStreamBeginCapture_v2)           \
  X(cuStreamBeginCapture_v2_ptsz)      \
  X(cuStreamBeginCaptureToGraph)       \
  X(cuStreamBeginCaptureToGraph_ptsz)  \
  X(cuStreamEndCapture)                \
  X(cuStreamEndCapture_ptsz)           \
  X(cuStreamDestroy)                   \
  X(cuStreamDestroy_v2)                \
  X(cuIpcOpenMemHandle_v2)             \
  X(cuIpcCloseMemHandle)               \
  X(cuArrayCreate_v2)                  \
  X(cuArray3DCreate_v2)                \
  X(cuMipmappedArrayCreate)            \
  X(cuArrayDestroy)                    \
  X(cuMipmappedArrayDestroy)           \
  X(cuImportExternalMemory)            \
  X(cuDestroyExternalMemory)           \
  X(cuExternalMemoryGetMappedBuffer)   \
  X(cuDevicePrimaryCtxRetain)          \
  X(cuDevicePrimaryCtxRelease_v2)      \
  X(cuDevicePrimaryCtxReset_v2)        \
  X(cuCtxCreate_v2)                    \
  X(cuCtxCreate_v3)                    \
  X(cuCtxCreate_v4)                    \
  X(cuCtxDestroy_v2)                   \
  X(cuGetProcAddress)                  \
  X(cuGetProcAddress_v2)

enum class HookId : unsigned {
#define CUMEMTRACE_ENUM(name) k_##name,
  CUMEMTRACE_HOOKS(CUMEMTRACE_ENUM)
#undef CUMEMTRACE_ENUM
      kCount
};

// The driver's function behind each hook, resolved once (read inline on every call).
extern std::atomic<void*> g_real[static_cast<unsigned>(HookId::kCount)];
void* real_slow(HookId id) noexcept;
inline void* real(HookId id) noexcept {
  void* p = g_real[static_cast<unsigned>(id)].load(std::memory_order_acquire);
  return p ? p : real_slow(id);
}
// real() as the hook's own function type.
template <typename Fn>
Fn real_fn(HookId id) noexcept {
  return reinterpret_cast<Fn>(real(id));
}
void set_real(HookId id, void* fn) noexcept;
void* route(void* real_fn) noexcept;

}  // namespace cumemtrace::preload
