// Hooks for device memory that is not a pointer allocation: CUDA arrays and mipmapped arrays,
// and external memory (imported from Vulkan, DirectX, NvSciBuf or a file descriptor). Each is a
// device allocation (kAlloc / kFree) at its handle's value: a CUarray, CUmipmappedArray or
// CUexternalMemory is a host-side handle, so it never collides with a device address. Sizes: an
// array's is computed from its descriptor (width x height x depth x texel bytes, levels halving
// for mipmaps: the data it holds, without the driver's padding and alignment, which the driver
// does not report: cuArrayGetMemoryRequirements answers only for deferred-mapping arrays, which
// hold no memory of their own and count 0 bytes); external memory's is the size in its handle
// descriptor. A mapped buffer of external memory
// (cuExternalMemoryGetMappedBuffer) is a view of it: recorded as an imported mapping, released by
// cuMemFree. None of these is on an allocation hot path.
#include <cuda.h>

#include "core/export.h"
#include "driver/real_driver.h"
#include "hooks/alloc_outcome.h"
#include "hooks/hook_table.h"
#include "record/recorder.h"

#undef cuArrayCreate
#undef cuArray3DCreate

using cumemtrace::preload::EventArgs;
using cumemtrace::preload::HookId;
using cumemtrace::preload::real_fn;
using cumemtrace::preload::ReentryGuard;
using cumemtrace::preload::u64;
using cumemtrace::wire::Api;
using cumemtrace::wire::Kind;
namespace pl = cumemtrace::preload;

namespace {

// Bytes per texel of a format with `channels` channels; block-compressed formats per texel of
// their 4x4 blocks (BC1/BC4: 8 bytes a block, the others 16).
uint64_t texel_bytes(CUarray_format format, unsigned channels) {
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return channels;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2u * channels;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4u * channels;
    case CU_AD_FORMAT_UNORM_INT8X1:
    case CU_AD_FORMAT_SNORM_INT8X1:
      return 1;
    case CU_AD_FORMAT_UNORM_INT8X2:
    case CU_AD_FORMAT_SNORM_INT8X2:
    case CU_AD_FORMAT_UNORM_INT16X1:
    case CU_AD_FORMAT_SNORM_INT16X1:
      return 2;
    case CU_AD_FORMAT_UNORM_INT8X4:
    case CU_AD_FORMAT_SNORM_INT8X4:
    case CU_AD_FORMAT_UNORM_INT16X2:
    case CU_AD_FORMAT_SNORM_INT16X2:
    case CU_AD_FORMAT_UNORM_INT_101010_2:
      return 4;
    case CU_AD_FORMAT_UNORM_INT16X4:
    case CU_AD_FORMAT_SNORM_INT16X4:
      return 8;
    default:  // YUV and other packed formats: a byte per channel
      return channels ? channels : 1;
  }
}

bool half_byte_block(CUarray_format f) {
  return f == CU_AD_FORMAT_BC1_UNORM || f == CU_AD_FORMAT_BC1_UNORM_SRGB ||
         f == CU_AD_FORMAT_BC4_UNORM || f == CU_AD_FORMAT_BC4_SNORM;
}

bool block_compressed(CUarray_format f) {
  return f >= CU_AD_FORMAT_BC1_UNORM && f <= CU_AD_FORMAT_BC7_UNORM_SRGB;
}

uint64_t level_bytes(uint64_t w, uint64_t h, uint64_t d, CUarray_format f, unsigned channels) {
  const uint64_t texels = w * (h ? h : 1) * (d ? d : 1);
  if (block_compressed(f)) return half_byte_block(f) ? texels / 2 : texels;
  return texels * texel_bytes(f, channels);
}

uint64_t descriptor_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels) {
  // Layered arrays keep every layer at every level: the depth does not shrink.
  const bool layered = d.Flags & CUDA_ARRAY3D_LAYERED;
  uint64_t w = d.Width, h = d.Height, z = d.Depth, total = 0;
  for (unsigned l = 0; l < (levels ? levels : 1); ++l) {
    total += level_bytes(w, h, z, d.Format, d.NumChannels);
    w = w > 1 ? w / 2 : 1;
    if (h) h = h > 1 ? h / 2 : 1;
    if (z && !layered) z = z > 1 ? z / 2 : 1;
  }
  return total;
}

// Arrays created for deferred mapping hold no memory of their own: what is later mapped into
// them (cuMemMapArrayAsync) is a cuMemCreate handle, counted there.
uint64_t array_bytes(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned levels) {
  return d.Flags & CUDA_ARRAY3D_DEFERRED_MAPPING ? 0 : descriptor_bytes(d, levels);
}

// An array or external memory object's outcome: its handle is the address, on no stream.
void record_alloc(CUresult r, Api api, uint64_t handle, uint64_t size, int device) noexcept {
  pl::after_alloc(r, api, Kind::kAlloc, handle, size, 0, 0, [device] { return device; });
}

// Records the free before the real destroy (the handle may be reused at once), and undoes it
// when the driver refused.
template <typename Call>
CUresult destroy(Api api, uint64_t handle, Call call) noexcept {
  ReentryGuard g;
  const bool rec = g.outer && handle && pl::tracing_possible();
  if (rec) {
    EventArgs a{Kind::kFree, api};
    a.addr = handle;
    pl::record(a);
  }
  CUresult r = call();
  if (rec && r != CUDA_SUCCESS) {
    EventArgs a{Kind::kFreeFailed, api, static_cast<int32_t>(r)};
    a.addr = handle;
    pl::record(a);
  }
  return r;
}

}  // namespace

CUMEMTRACE_EXPORT CUresult cuArrayCreate_v2(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  auto fn =
      real_fn<CUresult (*)(CUarray*, const CUDA_ARRAY_DESCRIPTOR*)>(HookId::k_cuArrayCreate_v2);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(handle, desc);
  if (g.outer && desc && pl::tracing_possible()) {
    CUDA_ARRAY3D_DESCRIPTOR d3{desc->Width, desc->Height, 0, desc->Format, desc->NumChannels, 0};
    const int device = r == CUDA_SUCCESS ? pl::current_device() : -1;
    const uint64_t bytes = array_bytes(d3, 1);
    record_alloc(r, Api::kArrayCreate, r == CUDA_SUCCESS ? u64(*handle) : 0, bytes, device);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuArray3DCreate_v2(CUarray* handle,
                                              const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  auto fn =
      real_fn<CUresult (*)(CUarray*, const CUDA_ARRAY3D_DESCRIPTOR*)>(HookId::k_cuArray3DCreate_v2);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(handle, desc);
  if (g.outer && desc && pl::tracing_possible()) {
    const int device = r == CUDA_SUCCESS ? pl::current_device() : -1;
    const uint64_t bytes = array_bytes(*desc, 1);
    record_alloc(r, Api::kArray3DCreate, r == CUDA_SUCCESS ? u64(*handle) : 0, bytes, device);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray* handle,
                                                  const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                                  unsigned int levels) {
  auto fn = real_fn<CUresult (*)(CUmipmappedArray*, const CUDA_ARRAY3D_DESCRIPTOR*, unsigned)>(
      HookId::k_cuMipmappedArrayCreate);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(handle, desc, levels);
  if (g.outer && desc && pl::tracing_possible()) {
    const int device = r == CUDA_SUCCESS ? pl::current_device() : -1;
    const uint64_t bytes = array_bytes(*desc, levels);
    record_alloc(r, Api::kMipmappedArrayCreate, r == CUDA_SUCCESS ? u64(*handle) : 0, bytes,
                 device);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuArrayDestroy(CUarray handle) {
  auto fn = real_fn<CUresult (*)(CUarray)>(HookId::k_cuArrayDestroy);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  return destroy(Api::kArrayDestroy, u64(handle), [&] { return fn(handle); });
}

CUMEMTRACE_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray handle) {
  auto fn = real_fn<CUresult (*)(CUmipmappedArray)>(HookId::k_cuMipmappedArrayDestroy);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  return destroy(Api::kMipmappedArrayDestroy, u64(handle), [&] { return fn(handle); });
}

CUMEMTRACE_EXPORT CUresult cuImportExternalMemory(CUexternalMemory* ext,
                                                  const CUDA_EXTERNAL_MEMORY_HANDLE_DESC* desc) {
  auto fn = real_fn<CUresult (*)(CUexternalMemory*, const CUDA_EXTERNAL_MEMORY_HANDLE_DESC*)>(
      HookId::k_cuImportExternalMemory);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(ext, desc);
  if (g.outer && desc && pl::tracing_possible()) {
    record_alloc(r, Api::kImportExternalMemory, r == CUDA_SUCCESS ? u64(*ext) : 0, desc->size,
                 r == CUDA_SUCCESS ? pl::current_device() : -1);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuDestroyExternalMemory(CUexternalMemory ext) {
  auto fn = real_fn<CUresult (*)(CUexternalMemory)>(HookId::k_cuDestroyExternalMemory);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  return destroy(Api::kDestroyExternalMemory, u64(ext), [&] { return fn(ext); });
}

CUMEMTRACE_EXPORT CUresult cuExternalMemoryGetMappedBuffer(
    CUdeviceptr* dptr, CUexternalMemory ext, const CUDA_EXTERNAL_MEMORY_BUFFER_DESC* desc) {
  auto fn = real_fn<CUresult (*)(CUdeviceptr*, CUexternalMemory,
                                 const CUDA_EXTERNAL_MEMORY_BUFFER_DESC*)>(
      HookId::k_cuExternalMemoryGetMappedBuffer);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(dptr, ext, desc);
  if (g.outer && r == CUDA_SUCCESS && dptr && desc && pl::tracing_possible()) {
    EventArgs a{Kind::kMapImported, Api::kExternalMemoryGetMappedBuffer};
    a.addr = *dptr;
    a.size = desc->size;
    a.aux = u64(ext);
    a.device = pl::current_device();
    pl::record(a);
  }
  return r;
}
