// Contract: turns the times a ring's events carry into CLOCK_MONOTONIC nanoseconds, the clock the
// rest of the collector (and the ring header's epoch pair) speaks. A ring of kTimeMonotonic or
// kTimeMonotonicCoarse (the same ns at the kernel tick's resolution) passes its times through. A
// ring of kTimeTsc (preload/core/event_clock.h: events read the TSC, which is CLOCK_MONOTONIC's own
// source on that machine) is converted with two (TSC, monotonic) pairs: the producer's, taken when
// the ring was made, and the collector's newest, taken on every refresh(). Their ratio is the tick
// length, measured over the whole run so far, and each event is placed back from the newest pair: a
// conversion's error is about the jitter of a pair (tens of ns) times lag/baseline, and lag (newest
// pair - event) is at most the baseline (pair - ring's start) for an event drained after its
// refresh. The order of events stays the ring's ticket order; times are never earlier than the
// ring's start.
#pragma once

#include <cstdint>

#include "wire_format.h"

namespace cumemtrace::collect {

class EventClock {
 public:
  // Throws CorruptRing (corrupt_ring.h) for a time source this collector cannot read.
  explicit EventClock(const wire::RingHeader& header);
  // For tests: a TSC ring whose pairs are given instead of read.
  EventClock(uint64_t start_tsc, uint64_t start_ns);

  // Takes a new (TSC, monotonic) pair (tsc_pair.h, as the producer read the ring's); call
  // before converting a batch.
  void refresh();
  void refresh(uint64_t tsc_now, uint64_t ns_now);
  uint64_t to_monotonic_ns(uint64_t event_time) const;

 private:
  bool tsc_ = false;
  uint64_t start_tsc_ = 0;
  uint64_t start_ns_ = 0;
  uint64_t tsc_now_ = 0;
  uint64_t ns_now_ = 0;
  double ns_per_tick_ = 0;  // 0 until the baseline is measurable
};

}  // namespace cumemtrace::collect
