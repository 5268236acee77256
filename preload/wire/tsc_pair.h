// Contract: how a (TSC, CLOCK_MONOTONIC) pair is read, by both ends of a kTimeTsc ring
// (wire_format.h: TimeSource): the preload once, for RingHeader's start_tsc and
// start_monotonic_ns, and the collector before each batch it converts (collector/live/
// event_clock.h). The two pairs' ratio is the tick length, and every event is placed back from
// the newest pair, so an error in either pair moves the events of a batch by up to that error.
// One TSC read between two clock reads, paired with their midpoint, is off by up to half the
// window: a preemption between the reads (seen on two loaded cores, under the address sanitizer)
// makes that tens of microseconds. So the pair is the narrowest window of a few tries. x86-64
// only; noexcept and heap-free (the preload reads it while it makes the ring).
#pragma once

#include <time.h>

#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>

namespace cumemtrace::wire {

struct TscPair {
  uint64_t tsc = 0;
  uint64_t monotonic_ns = 0;
};

// A window this narrow is as good as a pair gets (two vDSO reads and an rdtsc take about
// 100 ns); wider ones are read again, at most kTscPairTries times.
inline constexpr uint64_t kTscPairTightNs = 1'000;
inline constexpr int kTscPairTries = 8;

inline uint64_t tsc_pair_clock_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

inline TscPair read_tsc_pair() noexcept {
  TscPair best;
  uint64_t best_window = UINT64_MAX;  // the two clock reads' distance: the pair's uncertainty
  for (int i = 0; i < kTscPairTries && best_window > kTscPairTightNs; ++i) {
    const uint64_t a = tsc_pair_clock_ns();
    const uint64_t t = __rdtsc();
    const uint64_t b = tsc_pair_clock_ns();
    if (b - a < best_window) {
      best_window = b - a;
      best = {t, a + (b - a) / 2};
    }
  }
  return best;
}

}  // namespace cumemtrace::wire
#endif
