#include "summary.h"

#include <map>

#include <fmt/format.h>

#include "size_format.h"

namespace cumemtrace::collect {

std::string summarize(const snap::Snapshot& s) {
  if (!s.tool) return {};
  const auto& t = *s.tool;
  std::string exe = t.exe.substr(t.exe.rfind('/') == std::string::npos ? 0 : t.exe.rfind('/') + 1);
  std::string ended;
  if (t.ended.how == "exit") {
    ended = fmt::format("exited with {}", t.ended.code);
  } else if (t.ended.how == "signal") {
    ended = fmt::format("was killed by signal {}", t.ended.signal);
  } else if (t.ended.how == "exec") {
    ended = "exec'd another program";
  } else if (t.ended.how == "vanished") {
    ended = "ended without exit() (killed or crashed)";
  } else {
    ended = "is still running";
  }
  std::string peaks, live;
  uint64_t live_total = 0;
  for (const auto& d : t.devices) {
    peaks += fmt::format("{}device {} {}", peaks.empty() ? "" : ", ", d.device,
                         snap::format_bytes(d.peak_bytes));
    if (d.live_bytes) {
      live += fmt::format("{}device {} {}", live.empty() ? "" : ", ", d.device,
                          snap::format_bytes(d.live_bytes));
    }
    live_total += d.live_bytes;
  }
  size_t live_allocs = 0;
  for (const auto& g : s.segments) live_allocs += g.blocks.size();
  std::string out = fmt::format(
      "cumemtrace: {} (pid {}) {}: {} events, {} dropped; peak {}; live at exit {} in {} "
      "allocation{}{}",
      exe, t.pid, ended, t.events_total, t.events_dropped, peaks.empty() ? "none" : peaks,
      snap::format_bytes(live_total), live_allocs, live_allocs == 1 ? "" : "s",
      live.empty() ? "" : " (" + live + ")");
  if (!t.vmm_handles.empty()) out += fmt::format("; {} VMM handles held", t.vmm_handles.size());
  if (!t.host_allocations.empty()) {
    out += fmt::format("; {} pinned host allocations held", t.host_allocations.size());
  }
  if (!t.anomalies.empty()) out += fmt::format("; {} anomalies", t.anomalies.size());
  if (t.trace_entries_dropped) {
    out += fmt::format("; oldest {} trace entries discarded (--max-trace-events)",
                       t.trace_entries_dropped);
  }
  // The driver's latest figure per device next to the tracked bytes: the difference is what
  // the CUDA context, modules and untracked libraries hold.
  std::map<int, uint64_t> driver;
  for (const auto& m : t.driver_memory) driver[m.device] = m.used_bytes;
  std::string seen;
  for (const auto& [device, used] : driver) {
    uint64_t tracked = 0;
    for (const auto& d : t.devices) {
      if (d.device == device) tracked = d.live_bytes;
    }
    seen += fmt::format("{}device {} {} ({} tracked)", seen.empty() ? "" : ", ", device,
                        snap::format_bytes(used), snap::format_bytes(tracked));
  }
  if (!seen.empty()) out += "; driver-visible at last sample " + seen;
  if (t.events_dropped) out += " [INCOMPLETE: events were dropped]";
  if (!t.ring_error.empty()) out += " [INCOMPLETE: " + t.ring_error + "]";
  return out + ".\n";
}

}  // namespace cumemtrace::collect
