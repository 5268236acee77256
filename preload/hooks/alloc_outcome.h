// Contract: the one event an allocation hook records for the call's outcome, shared by every
// hook file that allocates: `ok_kind` with the address and device on success (`device` is asked
// only then, while the allocating context is current), kOom with the current device's free bytes
// on CUDA_ERROR_OUT_OF_MEMORY, kAllocFailed for any other error. Called after the real call,
// inside the hook's ReentryGuard. `time`: the success event's time when the hook has read it
// (EventArgs::time), else 0.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "driver/real_driver.h"
#include "record/recorder.h"

namespace cumemtrace::preload {

template <typename DeviceFn>
void after_alloc(CUresult r, wire::Api api, wire::Kind ok_kind, uint64_t addr, uint64_t size,
                 uint64_t stream, uint8_t flags, DeviceFn device, uint64_t time = 0) noexcept {
  if (r == CUDA_SUCCESS) {
    EventFields f{ok_kind, api};
    f.addr = addr;
    f.size = size;
    f.device = device();
    f.stream = stream;
    f.flags = flags;
    record_fields(f, time);
    return;
  }
  EventArgs a{ok_kind, api, static_cast<int32_t>(r)};
  a.size = size;
  a.stream = stream;
  a.flags = flags;
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    a.kind = wire::Kind::kOom;
    a.device = current_device();
    a.aux = device_free_bytes();
  } else {
    a.kind = wire::Kind::kAllocFailed;
  }
  record(a);
}

}  // namespace cumemtrace::preload
