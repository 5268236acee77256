#include "event_clock.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

namespace cumemtrace::preload {

bool g_event_clock_tsc = false;

namespace {

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

wire::TimeSource choose_event_clock(uint64_t& start_tsc) noexcept {
  start_tsc = 0;
#if defined(__x86_64__)
  g_event_clock_tsc = clocksource_is_tsc();
  if (g_event_clock_tsc) {
    start_tsc = __rdtsc();
    return wire::kTimeTsc;
  }
#endif
  g_event_clock_tsc = false;
  return wire::kTimeMonotonic;
}

}  // namespace cumemtrace::preload
