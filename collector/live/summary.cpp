#include "live/summary.h"

#include <map>

#include <fmt/format.h>

#include "analysis/breakdown_format.h"
#include "analysis/frames.h"
#include "analysis/model.h"
#include "analysis/rank_identity.h"
#include "snapshot/size_format.h"

namespace cumemtrace::collect {

std::string summarize(const analysis::AnalysedSnapshot& view) {
  const snap::Snapshot& s = view.snapshot();
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
  // Every number here comes from the analysis engine, so it is the number `report`, `check` and
  // the viewers show for the same file.
  const analysis::SiteTable sites(s);
  const analysis::RankIdentity id = analysis::rank_identity(s);
  std::string peaks, live, layers;
  uint64_t live_total = 0;
  std::map<int, uint64_t> live_by_device;
  const auto held = analysis::live_at_exit(s);
  for (const auto& a : held) live_by_device[a.device] += a.size;
  const int n = analysis::device_count(s);
  for (int d = 0; d < n; ++d) {
    const analysis::DeviceReplay& rp = view.replay(d);
    const auto& tl = rp.timeline();
    const uint64_t held_d = live_by_device.count(d) ? live_by_device[d] : 0;
    if (!tl.highest_known().bytes && !held_d && !tl.has_driver && !tl.has_reserved) continue;
    peaks += fmt::format("{}device {} {}", peaks.empty() ? "" : ", ", d,
                         snap::format_bytes(tl.highest_known().bytes));
    if (held_d) {
      live +=
          fmt::format("{}device {} {}", live.empty() ? "" : ", ", d, snap::format_bytes(held_d));
    }
    live_total += held_d;
    const auto exit = rp.breakdown_at_exit(sites);
    for (const std::string& part :
         {analysis::pytorch_layers_text(exit), analysis::driver_layers_text(exit)}) {
      if (!part.empty()) layers += fmt::format("; device {} at exit: {}", d, part);
    }
  }
  std::string out = fmt::format(
      "cumemtrace: {} (pid {}{}) {}: {} events, {} dropped; peak {}; live at exit {} in {}{}", exe,
      t.pid, id.known() ? "; " + id.describe() : std::string(), ended, t.events_total,
      t.events_dropped, peaks.empty() ? "none" : peaks, snap::format_bytes(live_total),
      analysis::live_count_text(analysis::count_live(held)), live.empty() ? "" : " (" + live + ")");
  out += layers;
  if (!t.vmm_handles.empty()) out += fmt::format("; {} VMM handles held", t.vmm_handles.size());
  if (!t.host_allocations.empty()) {
    out += fmt::format("; {} pinned host allocations held", t.host_allocations.size());
  }
  if (!t.anomalies.empty()) out += fmt::format("; {} anomalies", t.anomalies.size());
  if (t.trace_entries_dropped) {
    out += fmt::format("; oldest {} trace entries discarded (--max-trace-events)",
                       t.trace_entries_dropped);
  }
  if (t.events_dropped) out += " [INCOMPLETE: events were dropped]";
  if (!t.ring_error.empty()) out += " [INCOMPLETE: " + t.ring_error + "]";
  return out + ".\n";
}

std::string summarize_job(const std::vector<const snap::Snapshot*>& processes) {
  uint64_t total = 0, most = 0;
  const snap::Snapshot* holder = nullptr;
  for (const snap::Snapshot* s : processes) {
    uint64_t held = 0;
    for (const auto& a : analysis::live_at_exit(*s)) held += a.size;
    total += held;
    if (!holder || held > most) {
      most = held;
      holder = s;
    }
  }
  if (!holder || !holder->tool) return {};
  const analysis::RankIdentity id = analysis::rank_identity(*holder);
  return fmt::format(
      "cumemtrace: job: {} processes traced; live at exit {} in total, most by {} (pid {}): {}.\n",
      processes.size(), snap::format_bytes(total), id.known() ? id.describe() : "the process",
      holder->tool->pid, snap::format_bytes(most));
}

}  // namespace cumemtrace::collect
