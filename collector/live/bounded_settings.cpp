#include "live/bounded_settings.h"

#include <cstdlib>

#include <fmt/format.h>

#include "snapshot/size_format.h"

namespace cumemtrace::collect {

std::string apply_bounded(const BoundedSettings& b, CollectorOptions& opts) {
  if (!b.keep.empty() && b.keep != "all" && b.keep != "bounded") {
    return fmt::format("{} must be all or bounded, got '{}'", b.spelled_keep, b.keep);
  }
  const bool bounded = b.keep == "bounded";
  if (!bounded && (!b.max_disk.empty() || !b.interval.empty())) {
    return fmt::format("{} and {} need {} bounded", b.spelled_max_disk, b.spelled_interval,
                       b.spelled_keep);
  }
  if (!bounded) return {};
  uint64_t cap = kDefaultMaxDiskBytes;
  if (!b.max_disk.empty()) {
    const auto v = snap::parse_bytes(b.max_disk);
    if (!v || !*v) {
      return fmt::format("{} must be a size above 0 (\"1GiB\", \"500MB\"), got '{}'",
                         b.spelled_max_disk, b.max_disk);
    }
    cap = *v;
  }
  double interval = kDefaultIntervalSeconds;
  if (!b.interval.empty()) {
    char* end = nullptr;
    interval = strtod(b.interval.c_str(), &end);
    if (*end || !(interval >= 0 && interval <= 1e9)) {
      return fmt::format("{} must be seconds (0 or more), got '{}'", b.spelled_interval,
                         b.interval);
    }
  }
  opts.max_disk_bytes = cap;
  opts.session.interval_s = interval;
  if (!opts.session.max_trace_events) opts.session.max_trace_events = kBoundedTraceEvents;
  return {};
}

}  // namespace cumemtrace::collect
