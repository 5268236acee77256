// Contract: the collector's running byte counts per device of one traced process: device bytes
// live now (device allocations and owned VMM handles, graph memory included: the allocation
// tracker calls grow/shrink, nothing else does), the count and bytes of allocations and frees,
// the driver's graph memory pool readings, and the peaks below. Devices are CUDA ordinals from
// the target, clamped by sane_device() so that a corrupt value cannot size a huge table.
//
// Which watermark (analysis/watermark.h) is whose (one author each):
//   peak                  the highest `live` since the start, at the record that reached it:
//                         written by grow() only; the snapshot's tool.devices[].peak_bytes.
//                         The replay of a snapshot (analysis/model.h) keeps it beside its own
//                         (Timeline::collector_summary beside Timeline::trace; cuMemCreate'd
//                         handles have no trace entry, a bounded trace lost the entries that
//                         reached it): the collector's is the run's, the replay's that of the
//                         entries the file holds; neither overrides the other.
//   window_peak           the highest `live` since reset_window_peaks(): bounded capture's
//                         interval summaries (live/interval_log.h) own its resets.
//   graph_reserved_peak   the highest graph pool reading (kGraphMemReserved), the driver's; the
//                         readings carry no time (time_us 0).
// PyTorch's reserved and allocated bytes are not counted here (the driver's bytes stay the
// device's; live/torch_allocator.h sums its own).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "analysis/watermark.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

constexpr int kMaxDevices = 1024;
inline int sane_device(int d) {
  return d >= 0 && d < kMaxDevices ? d : 0;
}

class DeviceLedger {
 public:
  struct Device {
    uint64_t live = 0;
    analysis::Watermark peak;
    uint64_t allocations = 0;
    uint64_t frees = 0;
    uint64_t graph_reserved = 0;
    analysis::Watermark graph_reserved_peak;
    uint64_t bytes_allocated = 0;
    uint64_t bytes_freed = 0;
    analysis::Watermark window_peak;
  };

  // The device's counts, made (zero) when first named: a device with events is listed even when
  // it holds nothing.
  Device& at(int device);
  const std::vector<Device>& devices() const { return devices_; }
  uint64_t live(int device) const;

  // An allocation of size bytes at time t by stack (a new one: counted).
  void grow(int device, uint64_t size, int64_t t, int32_t stack);
  // The same allocation coming back after a free the driver refused: live and peak as grow(),
  // the counts of allocations and frees unchanged.
  void restore(int device, uint64_t size, int64_t t, int32_t stack);
  void shrink(int device, uint64_t size);
  void graph_pool_reading(int device, uint64_t reserved);

  void reset_window_peaks();
  // The highest peak among the devices whose live bytes are at their peak right now; 0: none is.
  uint64_t at_peak_bytes() const;

  // Device bytes allocated per stack, counted once count_stack_bytes() was called.
  void count_stack_bytes() { count_stack_bytes_ = true; }
  std::unordered_map<int32_t, uint64_t> take_stack_bytes();

  void write(std::vector<snap::DeviceSummary>& out) const;

 private:
  std::vector<Device> devices_;
  bool count_stack_bytes_ = false;
  std::unordered_map<int32_t, uint64_t> stack_bytes_;
};

}  // namespace cumemtrace::collect
