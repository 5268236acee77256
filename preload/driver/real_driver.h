// Contract: how the preload reaches the real libc and CUDA driver. real_dlsym() is glibc's dlsym
// (we export our own, so a plain call would find ourselves). driver_symbol() resolves a symbol
// of the already-loaded libcuda.so.1 (or loads it). The device queries call the real driver and
// are only used where the calling thread's context is known to be current: right after a
// successful allocation or on the out-of-memory path.
#pragma once

#include <cstdint>

namespace cumemtrace::preload {

using DlsymFn = void* (*)(void*, const char*);

DlsymFn real_dlsym() noexcept;
void* libcuda_handle() noexcept;
void* driver_symbol(const char* name) noexcept;

int current_device() noexcept;                // cuCtxGetDevice, -1 on failure
int pointer_device(uint64_t dptr) noexcept;   // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, -1
int stream_device(uint64_t stream) noexcept;  // cuStreamGetDevice (CUDA 12.8+), -1 without
uint64_t device_free_bytes() noexcept;        // cuMemGetInfo_v2 free bytes, 0 on failure
int handle_device(uint64_t handle) noexcept;  // a VMM handle's device location, -1 if none
// The graph being captured into on `stream` (a CUgraph), 0 when the stream is not capturing or
// the driver cannot say. `per_thread`: stream 0 is the per-thread default stream (_ptsz caller).
uint64_t capturing_graph(uint64_t stream, bool per_thread) noexcept;
// cuStreamIsCapturing: true while `stream` is capturing.
bool stream_capturing(uint64_t stream, bool per_thread) noexcept;
// The driver's graph memory on `device` (cuDeviceGetGraphMemAttribute, no context needed):
// false when it cannot be read.
bool graph_mem(int device, uint64_t* reserved, uint64_t* used) noexcept;
// The size of the allocation that contains `dptr` (cuMemGetAddressRange_v2; the caller's context
// is current), 0 when unknown.
uint64_t allocation_size(uint64_t dptr) noexcept;
// A stream-ordered memory pool's reserved and used bytes (cuMemPoolGetAttribute); `pool` 0 means
// the device's current pool (cuDeviceGetMemPool), whose handle is stored in *pool_out. No context
// needed. False when the driver has no such pool or query.
bool pool_usage(int ordinal, uint64_t pool, uint64_t* pool_out, uint64_t* reserved,
                uint64_t* used) noexcept;
// The PCI bus id ("0000:3B:00.0") of a CUDA ordinal; no context needed, the driver initialized.
bool device_pci_bus_id(int ordinal, char* buf, int len) noexcept;
// Whether `device`'s primary context is active (cuDevicePrimaryCtxGetState, no context needed):
// 1 active, 0 inactive, -1 when the driver cannot say.
int primary_ctx_active(int device) noexcept;

}  // namespace cumemtrace::preload
