#include "live/event_clock.h"

#include "live/corrupt_ring.h"
#include "tsc_pair.h"

namespace cumemtrace::collect {

namespace {

// Below this the pairs' own jitter is the ratio; events then lie within a microsecond anyway.
constexpr uint64_t kMinBaselineNs = 1'000;

}  // namespace

EventClock::EventClock(const wire::RingHeader& header) {
  // CLOCK_MONOTONIC_COARSE counts the same ns, as of the kernel's last tick.
  if (header.time_source == wire::kTimeMonotonic ||
      header.time_source == wire::kTimeMonotonicCoarse)
    return;
#if defined(__x86_64__)
  if (header.time_source == wire::kTimeTsc) {
    tsc_ = true;
    start_tsc_ = header.start_tsc;
    start_ns_ = header.start_monotonic_ns;
    refresh();
    return;
  }
#endif
  throw CorruptRing("the ring's events carry a clock this collector cannot read");
}

EventClock::EventClock(uint64_t start_tsc, uint64_t start_ns)
    : tsc_(true),
      start_tsc_(start_tsc),
      start_ns_(start_ns),
      tsc_now_(start_tsc),
      ns_now_(start_ns) {}

void EventClock::refresh() {
#if defined(__x86_64__)
  if (!tsc_) return;
  const wire::TscPair pair = wire::read_tsc_pair();
  refresh(pair.tsc, pair.monotonic_ns);
#endif
}

void EventClock::refresh(uint64_t tsc_now, uint64_t ns_now) {
  if (!tsc_ || tsc_now <= start_tsc_ || ns_now < start_ns_) return;
  tsc_now_ = tsc_now;
  ns_now_ = ns_now;
  if (ns_now - start_ns_ >= kMinBaselineNs) {
    ns_per_tick_ =
        static_cast<double>(ns_now - start_ns_) / static_cast<double>(tsc_now - start_tsc_);
  }
}

uint64_t EventClock::to_monotonic_ns(uint64_t t) const {
  if (!tsc_) return t;
  // Before the baseline is measurable every event drained lies within it (under a microsecond).
  if (ns_per_tick_ == 0) return t <= start_tsc_ ? start_ns_ : ns_now_;
  const double delta = static_cast<double>(static_cast<int64_t>(t - tsc_now_)) * ns_per_tick_;
  const double ns = static_cast<double>(ns_now_) + delta;
  return ns <= static_cast<double>(start_ns_) ? start_ns_ : static_cast<uint64_t>(ns);
}

}  // namespace cumemtrace::collect
