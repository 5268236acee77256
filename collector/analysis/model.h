// Contract: the questions every analysis command asks of a snapshot, answered the same way for
// cumemtrace and PyTorch files.
//  - live_at_exit: allocations still held when the snapshot was written. cumemtrace: every
//    allocation segment (one block each) plus the cuMemCreate handles still held (VMM mappings,
//    written as expandable segments, are skipped: their memory is the handles'); PyTorch:
//    `active_allocated` blocks only, so what the caching allocator keeps cached is no leak.
//  - DeviceReplay: the bytes-over-time of one device, replayed from the trace. cumemtrace files
//    count segment_alloc/segment_map (+) and segment_free/segment_unmap (-); PyTorch files count
//    alloc (+) and free_completed (-) as "allocated" and segment_* as "reserved". The replay
//    starts from what was live before the first entry: the end state minus what the trace made,
//    plus what the trace frees without having allocated it (PyTorch's ring keeps only the last
//    entries, so such frees are normal, not anomalies).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "snapshot.h"

namespace cumemtrace::analysis {

// Byte arithmetic on sums of untrusted sizes: wraps instead of overflowing (undefined behaviour
// for signed integers). Real snapshots never get near 2^63 bytes; corrupt ones must not crash.
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}

enum class Flavor { kCumemtrace, kTorch };
Flavor flavor_of(const snap::Snapshot& s);
std::string_view flavor_name(Flavor f);

struct Allocation {
  int device = 0;
  uint64_t addr = 0;
  uint64_t size = 0;
  int32_t stack = snap::kNoStack;
  bool before_trace = false;  // allocated before the trace window and its stack is unknown
};

std::vector<Allocation> live_at_exit(const snap::Snapshot& s);

// Times are shown relative to this: the traced program's start (cumemtrace), else the earliest
// trace entry.
int64_t time_origin(const snap::Snapshot& s);

// Number of devices the snapshot talks about (traces, segments, tool summary, annotations).
int device_count(const snap::Snapshot& s);

struct Timeline {
  int device = 0;
  uint64_t start_bytes = 0;  // live before the first trace entry
  uint64_t peak_bytes = 0;
  int64_t peak_time_us = 0;
  std::ptrdiff_t peak_index = -1;  // entry after which the peak holds; -1 = before the trace
  // cumemtrace files: the collector's summary (all events) knew a higher peak than the trace
  // replay; peak_index then still points at the trace's own highest point.
  bool peak_from_summary = false;
  uint64_t trace_peak_bytes = 0;  // the replay's own highest point
  uint64_t end_bytes = 0;
  uint64_t allocations = 0;   // entries that added memory
  uint64_t frees = 0;         // entries that removed memory
  bool has_reserved = false;  // PyTorch: cudaMalloc'd segments, cache included
  uint64_t reserved_peak_bytes = 0;
  int64_t reserved_peak_time_us = 0;
  uint64_t reserved_end_bytes = 0;
};

class DeviceReplay {
 public:
  DeviceReplay(const snap::Snapshot& s, int device);

  const Timeline& timeline() const { return tl_; }
  // Bytes live after entry `index` (-1: before the first entry).
  uint64_t bytes_after(std::ptrdiff_t index) const;
  // Allocations live after entry `index` (-1: before the first entry).
  std::vector<Allocation> live_after(std::ptrdiff_t index) const;
  // The last entry whose time is at or before `time_us`; -1 when none is.
  std::ptrdiff_t index_at_time(int64_t time_us) const;

 private:
  const snap::Snapshot& s_;
  const std::vector<snap::TraceEntry>* trace_;
  Flavor flavor_;
  Timeline tl_;
  std::vector<Allocation> start_live_;
  std::vector<int64_t> rel_;  // bytes after each entry relative to start_bytes
  // Stacks of the allocations live at exit, by address: fills in stacks the trace entries lack
  // (cumemtrace writes frames on `alloc` entries only, not on segment_map).
  std::unordered_map<uint64_t, std::pair<uint64_t, int32_t>> end_stacks_;
  bool sorted_ = true;
};

}  // namespace cumemtrace::analysis
