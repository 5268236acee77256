// Contract: a watermark, the one type of every peak in the collector's models: the highest bytes
// a series reached (units, a PyTorch layer, NVML samples, a phase's allocated bytes, a what-if
// row's reserved bytes, the collector's running count), when, and after which trace entry.
// Each series keeps its own, named for its source (Timeline::trace, ::collector_summary,
// ::reserved, ...): no watermark overrides another. A reader that shows one number picks a named
// watermark and says which it is (model.h: Timeline::highest_known()).
//  - bytes: the highest value; time_us: the first moment it held (later equal values keep it);
//  - index: the trace entry after which it held (DeviceReplay::bytes_after and friends); -1 when
//    it held before the first entry, or when it is no moment of the trace (the collector's
//    summary of all events, an NVML sample, a what-if replay): then no "live at" list belongs
//    to it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cumemtrace::analysis {

struct Watermark {
  uint64_t bytes = 0;
  int64_t time_us = 0;
  std::ptrdiff_t index = -1;

  // Raises the mark to `b` at (`t`, `i`) when `b` is higher; true when it did. Equal values do
  // not move it: a watermark is the first moment of its height.
  bool raise(uint64_t b, int64_t t, std::ptrdiff_t i = -1) {
    if (b <= bytes) return false;
    bytes = b;
    time_us = t;
    index = i;
    return true;
  }
};

}  // namespace cumemtrace::analysis
