#include "record/recording_meter.h"

#include <atomic>
#include <cstdio>

#include "core/config.h"
#include "core/event_clock.h"
#include "core/log.h"

namespace cumemtrace::preload {

namespace {

struct alignas(64) ClassSums {
  std::atomic<uint64_t> events{0};
  std::atomic<uint64_t> ticks{0};
  std::atomic<uint64_t> stacked{0};  // events with a stack, which the sums below cover
  std::atomic<uint64_t> phase_ticks[StackPhases::kCount] = {};
  std::atomic<uint64_t> native_frames{0};
  std::atomic<uint64_t> python_frames{0};
  std::atomic<uint64_t> replayed_frames{0};
  std::atomic<uint64_t> memo_frames{0};
  std::atomic<uint64_t> node_frames{0};
  std::atomic<uint64_t> python_memo_frames{0};
  std::atomic<uint64_t> python_watched_frames{0};
};
ClassSums g_sums[static_cast<int>(MeterClass::kCount)];
uint64_t g_start_time = 0;  // meter_time() at the session's start
uint64_t g_start_ns = 0;    // CLOCK_MONOTONIC then

}  // namespace

void meter_start(uint64_t start_event_time, uint64_t start_monotonic_ns) noexcept {
  g_start_time = start_event_time;
  g_start_ns = start_monotonic_ns;
  for (auto& s : g_sums) {
    s.events.store(0, std::memory_order_relaxed);
    s.ticks.store(0, std::memory_order_relaxed);
    s.stacked.store(0, std::memory_order_relaxed);
    for (auto& p : s.phase_ticks) p.store(0, std::memory_order_relaxed);
    s.native_frames.store(0, std::memory_order_relaxed);
    s.python_frames.store(0, std::memory_order_relaxed);
    s.replayed_frames.store(0, std::memory_order_relaxed);
    s.memo_frames.store(0, std::memory_order_relaxed);
    s.node_frames.store(0, std::memory_order_relaxed);
    s.python_memo_frames.store(0, std::memory_order_relaxed);
    s.python_watched_frames.store(0, std::memory_order_relaxed);
  }
}

void meter_add(MeterClass cls, uint64_t ticks, const StackPhases* phases) noexcept {
  ClassSums& s = g_sums[static_cast<int>(cls)];
  s.events.fetch_add(1, std::memory_order_relaxed);
  s.ticks.fetch_add(ticks, std::memory_order_relaxed);
  if (!phases) return;
  s.stacked.fetch_add(1, std::memory_order_relaxed);
  for (int i = 0; i < StackPhases::kCount; ++i) {
    s.phase_ticks[i].fetch_add(phases->ticks[i], std::memory_order_relaxed);
  }
  s.native_frames.fetch_add(phases->native_frames, std::memory_order_relaxed);
  s.python_frames.fetch_add(phases->python_frames, std::memory_order_relaxed);
  s.replayed_frames.fetch_add(phases->replayed_frames, std::memory_order_relaxed);
  s.memo_frames.fetch_add(phases->memo_frames, std::memory_order_relaxed);
  s.node_frames.fetch_add(phases->node_frames, std::memory_order_relaxed);
  s.python_memo_frames.fetch_add(phases->python_memo_frames, std::memory_order_relaxed);
  s.python_watched_frames.fetch_add(phases->python_watched_frames, std::memory_order_relaxed);
}

void print_meter() noexcept {
  // ns per meter_time() unit over the whole session (1 where the clock is CLOCK_MONOTONIC).
  const uint64_t elapsed_ns = monotonic_ns() - g_start_ns;
  const uint64_t elapsed_units = meter_time() - g_start_time;
  if (elapsed_ns == 0 || elapsed_units == 0) return;
  const double ns_per_unit = static_cast<double>(elapsed_ns) / static_cast<double>(elapsed_units);
  // Per MeterClass: its name for many events, then for one.
  static const struct {
    const char* many;
    const char* one;
  } kNames[] = {
      {"driver events", "driver event"},
      {"PyTorch block events", "PyTorch block event"},
      {"PyTorch block events without Python frames", "PyTorch block event without Python frames"}};
  static_assert(sizeof kNames / sizeof kNames[0] == static_cast<int>(MeterClass::kCount));
  for (int c = 0; c < static_cast<int>(MeterClass::kCount); ++c) {
    const uint64_t n = g_sums[c].events.load(std::memory_order_relaxed);
    if (n == 0) continue;
    const double ns =
        static_cast<double>(g_sums[c].ticks.load(std::memory_order_relaxed)) * ns_per_unit;
    char line[512];
    std::snprintf(line, sizeof line,
                  "recording took %.0f ns per event for %llu %s: %.3f ms in all, %.2f%% of the "
                  "%.3f s since tracing started",
                  ns / static_cast<double>(n), static_cast<unsigned long long>(n), kNames[c].many,
                  ns / 1e6, 100.0 * ns / static_cast<double>(elapsed_ns),
                  static_cast<double>(elapsed_ns) / 1e9);
    print_line(line);
    const uint64_t k = g_sums[c].stacked.load(std::memory_order_relaxed);
    if (k == 0) continue;
    const auto mean = [&](const std::atomic<uint64_t>& v) {
      return static_cast<double>(v.load(std::memory_order_relaxed)) / static_cast<double>(k);
    };
    const auto& p = g_sums[c].phase_ticks;
    std::snprintf(
        line, sizeof line,
        "of which, per %s with a stack (%llu of %llu): native stack %.0f ns (%.1f "
        "frames, %.2f an autograd node's; walk: %.1f frames replayed, %.1f ruled by the memo), "
        "module notes %.0f ns, "
        "Python stack %.0f ns (%.1f frames, %.1f from the thread's memo, %.1f of them without "
        "their code object), ring %.0f ns",
        kNames[c].one, static_cast<unsigned long long>(k), static_cast<unsigned long long>(n),
        mean(p[StackPhases::kNative]) * ns_per_unit, mean(g_sums[c].native_frames),
        mean(g_sums[c].node_frames), mean(g_sums[c].replayed_frames),
        mean(g_sums[c].memo_frames) - mean(g_sums[c].replayed_frames),
        mean(p[StackPhases::kModules]) * ns_per_unit, mean(p[StackPhases::kPython]) * ns_per_unit,
        mean(g_sums[c].python_frames), mean(g_sums[c].python_memo_frames),
        mean(g_sums[c].python_watched_frames), mean(p[StackPhases::kRing]) * ns_per_unit);
    print_line(line);
  }
}

}  // namespace cumemtrace::preload
