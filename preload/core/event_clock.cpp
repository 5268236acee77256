#include "core/event_clock.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "wire/tsc_pair.h"

namespace cumemtrace::preload {

bool g_event_clock_tsc = false;
bool g_event_clock_coarse = false;
bool g_tsc_clocksource = false;

namespace {

// event_units(): the TSC and CLOCK_MONOTONIC at choose_event_clock(), and the TSC's ticks per
// 1,024 ns once measured (0 before).
uint64_t g_start_tsc = 0;
uint64_t g_start_ns = 0;
std::atomic<uint64_t> g_ticks_per_1024ns{0};

bool clocksource_is_tsc() noexcept {
  const int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                      O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[16] = {};
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  return n >= 3 && std::strncmp(buf, "tsc", 3) == 0 && (n == 3 || buf[3] == '\n');
}

}  // namespace

uint64_t clock_ns(clockid_t id) noexcept {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

wire::TimeSource choose_event_clock(bool coarse, uint64_t& start_tsc, uint64_t& start_ns) noexcept {
  start_tsc = 0;
  g_event_clock_coarse = coarse;
#if defined(__x86_64__)
  g_tsc_clocksource = clocksource_is_tsc();
  g_event_clock_tsc = g_tsc_clocksource && !coarse;
  if (g_event_clock_tsc) {
    const wire::TscPair pair = wire::read_tsc_pair();
    start_tsc = g_start_tsc = pair.tsc;
    start_ns = g_start_ns = pair.monotonic_ns;
    g_ticks_per_1024ns.store(0, std::memory_order_relaxed);
    return wire::kTimeTsc;
  }
#endif
  g_event_clock_tsc = false;
  start_ns = clock_ns(coarse ? CLOCK_MONOTONIC_COARSE : CLOCK_MONOTONIC);
  return coarse ? wire::kTimeMonotonicCoarse : wire::kTimeMonotonic;
}

uint64_t event_units(uint64_t ns) noexcept {
#if defined(__x86_64__)
  if (g_event_clock_tsc) {
    uint64_t rate = g_ticks_per_1024ns.load(std::memory_order_relaxed);
    if (rate == 0) {
      // Both ends read as pairs (wire/tsc_pair.h), each within about a microsecond: over 1 ms,
      // a rate within 0.1%. (Two reads apart, a preemption between them made it 2% and more.)
      const wire::TscPair now = wire::read_tsc_pair();
      if (now.monotonic_ns < g_start_ns + 1'000'000) return ns * 4;
      const uint64_t elapsed_ns = now.monotonic_ns - g_start_ns;
      const uint64_t elapsed_ticks = now.tsc - g_start_tsc;
      rate =
          static_cast<uint64_t>(static_cast<unsigned __int128>(elapsed_ticks) * 1024 / elapsed_ns);
      if (rate == 0) rate = 1;
      g_ticks_per_1024ns.store(rate, std::memory_order_relaxed);
    }
    return static_cast<uint64_t>(static_cast<unsigned __int128>(ns) * rate / 1024);
  }
#endif
  return ns;
}

}  // namespace cumemtrace::preload
