// Contract: the clock of every event's time_ns (wire_format.h: EventPayload::time_ns,
// RingHeader::time_source). Where the kernel keeps CLOCK_MONOTONIC with the TSC (its clocksource
// is "tsc": the TSC is then invariant and synchronized across CPUs, which the kernel checked),
// an event's time is one rdtsc, and the collector converts the ticks to CLOCK_MONOTONIC
// (collector/live/event_clock.h). Elsewhere, and off x86-64, it is clock_gettime(CLOCK_MONOTONIC).
// Why: on the H200 host clock_gettime costs 27–39 ns through the vDSO, the largest single piece
// of a stacks-off event (docs/performance.md). Chosen once per ring, before the ring is handed
// to the collector; noexcept and heap-free.
#pragma once

#include <time.h>

#include <cstdint>

#include "wire/wire_format.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace cumemtrace::preload {

// Set by choose_event_clock() before any event of the ring is written: events read the TSC, or
// (neither) CLOCK_MONOTONIC, or CLOCK_MONOTONIC_COARSE. g_tsc_clocksource: the TSC is the
// kernel's clocksource, whichever clock events read (meter_time()).
extern bool g_event_clock_tsc;
extern bool g_event_clock_coarse;
extern bool g_tsc_clocksource;

// Reads the clocksource once and fixes the clock of this process's events (`coarse`:
// CUMEMTRACE_CLOCK=coarse); returns what RingHeader::time_source must say, and the ring's start
// pair: `start_ns` in the clock events count from (CLOCK_MONOTONIC_COARSE for a coarse clock, so
// that no event is before it) and, for kTimeTsc, `start_tsc` read with it as one pair
// (wire/tsc_pair.h: a pair read apart is off by whatever preempted the thread between the
// reads). Also the start of event_units()'s measure of the TSC's rate.
wire::TimeSource choose_event_clock(bool coarse, uint64_t& start_tsc, uint64_t& start_ns) noexcept;

// clock_gettime(id) in ns: the one conversion the preload's clocks share.
uint64_t clock_ns(clockid_t id) noexcept;
inline uint64_t monotonic_ns() noexcept {
  return clock_ns(CLOCK_MONOTONIC);
}

// `ns` nanoseconds in event_time() units. With the TSC its rate is measured once against
// CLOCK_MONOTONIC, at the first call 1 ms or more after choose_event_clock(); an earlier call
// assumes 4 ticks a nanosecond. For intervals between things that happen anyway (the pool
// sampler's), so that a hook can compare the time its event reads instead of reading a clock of
// its own.
uint64_t event_units(uint64_t ns) noexcept;

inline uint64_t event_time() noexcept {
#if defined(__x86_64__)
  if (g_event_clock_tsc) return __rdtsc();
#endif
  if (g_event_clock_coarse) return clock_ns(CLOCK_MONOTONIC_COARSE);
  return monotonic_ns();
}

// A precise clock for CUMEMTRACE_DEBUG's meter (recording_meter.h), in its own units: the TSC
// where it is the clocksource, else CLOCK_MONOTONIC. The event clock where that is the TSC; a
// coarse event clock would measure nothing.
inline uint64_t meter_time() noexcept {
#if defined(__x86_64__)
  if (g_tsc_clocksource) return __rdtsc();
#endif
  return monotonic_ns();
}

}  // namespace cumemtrace::preload
