// The fake torch's c10/core/CachingDeviceAllocator.h: TraceEntry declared the way torch 2.11's
// header declares it (member order, types and the Action enum), our own text. Two readers:
// fake_c10_cuda.cpp compiles against it, and cumemtrace's attach (cumemtrace_torch.py) checks
// the member list against the layout the preload reads, as it does with the real wheel's header.
// Only what TraceEntry needs is declared here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

namespace c10 {
using DeviceIndex = int8_t;
using CaptureId_t = unsigned long long;
using MempoolId_t = std::pair<CaptureId_t, CaptureId_t>;
}  // namespace c10

namespace c10::CachingDeviceAllocator {

struct GatheredContext {
  virtual ~GatheredContext() = default;
};

union trace_time_ {
  int64_t t_;
  uint64_t approx_t_;
};

struct TraceEntry {
  enum Action {
    ALLOC,           // the allocator handed a block to the user
    FREE_REQUESTED,  // the user freed it
    FREE_COMPLETED,  // the block is back in the pool (may wait on other streams)
    SEGMENT_ALLOC,   // cudaMalloc
    SEGMENT_FREE,    // cudaFree
    SEGMENT_MAP,     // cuMemMap (expandable segments)
    SEGMENT_UNMAP,   // cuMemUnmap (expandable segments)
    SNAPSHOT,        // a memory snapshot was taken
    OOM              // the allocator raised OutOfMemoryError (addr_: free bytes)
  };
  Action action_;
  c10::DeviceIndex device_;
  size_t addr_;  // for OOM: the device's free bytes
  std::shared_ptr<GatheredContext> context_;
  void* stream_{};
  size_t size_;
  MempoolId_t mempool_;
  trace_time_ time_{};
  std::string compile_context_;
  std::string user_metadata_;
};

}  // namespace c10::CachingDeviceAllocator
