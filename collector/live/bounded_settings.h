// Contract: the settings of bounded capture, the same for `cumemtrace run` (--keep, --max-disk,
// --interval) and for a collector the preload started (CUMEMTRACE_KEEP, CUMEMTRACE_MAX_DISK,
// CUMEMTRACE_INTERVAL). keep is "all" (the default: every file whole) or "bounded": interval
// summaries for the whole run plus snapshot windows around what matters, their trace the newest
// kBoundedTraceEvents entries unless --max-trace-events says otherwise (20-40 MB of JSON at
// 200-400 bytes an entry with stacks: memory_viz opens it easily), all under a cap on disk (default
// 1 GiB; sizes as snap::parse_bytes reads them). apply_bounded returns one line when a value is
// wrong.
#pragma once

#include <cstdint>
#include <string>

#include "live/collector_loop.h"

namespace cumemtrace::collect {

inline constexpr uint64_t kDefaultMaxDiskBytes = 1ull << 30;
inline constexpr uint64_t kBoundedTraceEvents = 100000;
inline constexpr double kDefaultIntervalSeconds = IntervalLog::kDefaultIntervalUs / 1e6;

struct BoundedSettings {
  std::string keep;                     // "", "all" or "bounded"
  std::string max_disk;                 // "" = the default
  std::string interval;                 // seconds; "" = the default
  const char* spelled_keep = "--keep";  // how the user spelled each setting, for the message
  const char* spelled_max_disk = "--max-disk";
  const char* spelled_interval = "--interval";
};

std::string apply_bounded(const BoundedSettings& b, CollectorOptions& opts);

}  // namespace cumemtrace::collect
