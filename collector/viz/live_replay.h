// Contract: replays one device's trace to know what is live at every moment. Live means
// allocated and not yet completely freed: `alloc` adds a block, `free_completed` removes it
// (`free_requested` does not: the memory stays in use until the free completes). Reserved means
// what the driver handed out: `segment_alloc`/`segment_map` add, `segment_free`/`segment_unmap`
// subtract. A trace can start after the process did (PyTorch's ring buffer overflows), so blocks
// freed in the trace but never allocated in it, and blocks live in `segments` at the end but
// never allocated in the trace, were live before the first event: `preexisting_blocks` finds
// them and LiveTracker starts from them, which keeps totals and the exit state consistent.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "snapshot.h"

namespace cumemtrace::viz {

struct LiveBlock {
  uint64_t addr = 0;
  uint64_t size = 0;
  int32_t stack = snap::kNoStack;
  int64_t time_us = 0;  // when allocated; 0 for blocks older than the trace
};

// Devices that have a trace or a segment, ascending.
std::vector<int> devices_of(const snap::Snapshot& s);

std::vector<LiveBlock> preexisting_blocks(const snap::Snapshot& s, int device);

class LiveTracker {
 public:
  explicit LiveTracker(const std::vector<LiveBlock>& initial);

  struct Change {
    LiveBlock block;
    bool added = false;  // false: the block was removed
  };
  // Applies one entry; returns the block it added or removed, nothing for other actions, for a
  // free of an unknown address and for an alloc over a live address (which replaces it: the
  // returned change is the add, and the replaced block's bytes leave the total first).
  std::optional<Change> apply(const snap::TraceEntry& e);

  uint64_t live_bytes() const { return live_bytes_; }
  uint64_t reserved_bytes() const { return reserved_bytes_; }
  const std::unordered_map<uint64_t, LiveBlock>& live() const { return live_; }
  // Set by apply() when an alloc replaced a live block (a free we never saw).
  std::optional<LiveBlock> replaced;

 private:
  std::unordered_map<uint64_t, LiveBlock> live_;
  uint64_t live_bytes_ = 0;
  uint64_t reserved_bytes_ = 0;
};

struct DevicePeak {
  uint64_t bytes = 0;
  int64_t time_us = 0;
  // Entries applied when the peak was reached: 0 = before the first entry.
  size_t entries_applied = 0;
};

// The first moment of highest live bytes.
DevicePeak find_peak(const snap::Snapshot& s, int device);

// Blocks live after `entries_applied` entries (SIZE_MAX or beyond the trace: at the end).
std::vector<LiveBlock> live_after(const snap::Snapshot& s, int device, size_t entries_applied);

}  // namespace cumemtrace::viz
