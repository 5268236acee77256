#include "live/metrics_text.h"

#include <cstdint>
#include <map>

#include <fmt/format.h>

#include "analysis/analysed_snapshot.h"
#include "analysis/frames.h"
#include "analysis/model.h"
#include "analysis/rank_identity.h"
#include "pytorch/oom_verdict.h"

namespace cumemtrace::collect {

namespace {

struct Family {
  const char* name;  // without _total for counters
  const char* type;  // "gauge" or "counter"
  const char* help;
};

// Every family, in the order written; Metrics::add names them by their index here.
enum Id {
  kTracked,
  kAllocated,
  kReserved,
  kCachedFree,
  kLargestFree,
  kOtherLibraries,
  kDriverVisible,
  kContext,
  kOtherUntracked,
  kCategory,
  kTrackedPeak,
  kAllocatedPeak,
  kReservedPeak,
  kDriverPeak,
  kLiveAllocations,
  kOoms,
  kEvents,
  kDropped,
  kFamilies
};

constexpr Family kFamily[kFamilies] = {
    {"cumemtrace_tracked_bytes", "gauge", "device memory the collector tracks (all segments)"},
    {"cumemtrace_allocated_bytes", "gauge",
     "PyTorch's allocated bytes (or the stream-ordered pools')"},
    {"cumemtrace_reserved_bytes", "gauge", "PyTorch's reserved bytes (or the pools'), cache too"},
    {"cumemtrace_cached_free_bytes", "gauge", "reserved minus allocated: PyTorch's free cache"},
    {"cumemtrace_largest_free_block_bytes", "gauge", "largest free block in PyTorch's cache"},
    {"cumemtrace_other_libraries_bytes", "gauge", "tracked bytes outside PyTorch's segments"},
    {"cumemtrace_driver_visible_bytes", "gauge", "the process's memory as NVML reports it"},
    {"cumemtrace_context_bytes", "gauge", "CUDA contexts in being, measured at their creation"},
    {"cumemtrace_other_untracked_bytes", "gauge",
     "driver-visible minus tracked minus CUDA context"},
    {"cumemtrace_category_bytes", "gauge", "live bytes by what they are for"},
    {"cumemtrace_tracked_peak_bytes", "gauge", "highest tracked bytes so far"},
    {"cumemtrace_allocated_peak_bytes", "gauge", "highest PyTorch allocated bytes so far"},
    {"cumemtrace_reserved_peak_bytes", "gauge", "highest PyTorch reserved bytes so far"},
    {"cumemtrace_driver_visible_peak_bytes", "gauge", "highest driver-visible bytes so far"},
    {"cumemtrace_live_allocations", "gauge", "live allocations (tensors and driver allocations)"},
    {"cumemtrace_ooms", "counter", "out-of-memory errors"},
    {"cumemtrace_events", "counter", "events the collector read from the process"},
    {"cumemtrace_events_dropped", "counter", "events the process could not record (ring full)"},
};

// Label values: backslash, double quote and newline escaped (both formats).
std::string escape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Metrics {
 public:
  void add(Id id, const std::string& labels, uint64_t value) {
    samples_[id] +=
        fmt::format("{}{}{{{}}} {}\n", kFamily[id].name,
                    std::string_view(kFamily[id].type) == "counter" ? "_total" : "", labels, value);
  }
  std::string text(MetricsFormat f) const {
    std::string out;
    for (int id = 0; id < kFamilies; ++id) {
      const Family& fam = kFamily[id];
      // Prometheus' format names a counter by its sample (_total), OpenMetrics by its family.
      const bool counter = std::string_view(fam.type) == "counter";
      const std::string name =
          fmt::format("{}{}", fam.name, counter && f == MetricsFormat::kPrometheus ? "_total" : "");
      out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, fam.help, name, fam.type);
      if (f == MetricsFormat::kOpenMetrics && std::string_view(fam.name).ends_with("_bytes")) {
        out += fmt::format("# UNIT {} bytes\n", fam.name);
      }
      out += samples_[id];
    }
    if (f == MetricsFormat::kOpenMetrics) out += "# EOF\n";
    return out;
  }

 private:
  std::string samples_[kFamilies];
};

void add_process(const snap::Snapshot& s, Metrics& m) {
  const snap::ToolSection& t = *s.tool;
  const analysis::RankIdentity id = analysis::rank_identity(s);
  const std::string exe = t.exe.substr(t.exe.rfind('/') + 1);
  std::string labels =
      fmt::format("host=\"{}\",pid=\"{}\",exe=\"{}\"", escape(t.hostname), t.pid, escape(exe));
  // A job's ranks on one endpoint (run over a launcher): labels to aggregate them by.
  if (id.known()) labels += fmt::format(",rank=\"{}\"", id.rank);
  if (id.known() && id.local_rank >= 0) labels += fmt::format(",local_rank=\"{}\"", id.local_rank);
  if (id.known() && id.node >= 0) labels += fmt::format(",node=\"{}\"", id.node);
  if (id.known() && !id.job.empty()) labels += fmt::format(",job_id=\"{}\"", escape(id.job));
  m.add(kEvents, labels, t.events_total);
  m.add(kDropped, labels, t.events_dropped);

  const analysis::SiteTable sites(s);
  const analysis::AnalysedSnapshot view(s);  // one replay per device for the verdicts and gauges
  std::map<int, uint64_t> ooms;
  for (const auto& v : analysis::oom_verdicts(view, sites)) ++ooms[v.device];
  std::map<int, analysis::LiveCount> live;
  {
    std::map<int, std::vector<analysis::Allocation>> by_device;
    for (const auto& a : analysis::live_at_exit(s)) by_device[a.device].push_back(a);
    for (const auto& [d, v] : by_device) live[d] = analysis::count_live(v);
  }
  const int n = analysis::device_count(s);
  for (int d = 0; d < n; ++d) {
    const analysis::DeviceReplay& rp = view.replay(d);
    const analysis::Timeline& tl = rp.timeline();
    if (!analysis::device_used(tl, live.count(d) > 0)) continue;
    const std::string dl = fmt::format("{},device=\"{}\"", labels, d);
    const analysis::Breakdown b = rp.breakdown_at_exit(sites);
    m.add(kTracked, dl, b.tracked);
    if (b.has_pytorch) {
      m.add(kAllocated, dl, b.pytorch_allocated);
      m.add(kReserved, dl, b.pytorch_reserved);
      m.add(kCachedFree, dl, b.cached_free);
      if (b.largest_free_block) m.add(kLargestFree, dl, *b.largest_free_block);
      m.add(kAllocatedPeak, dl, tl.allocated.bytes);
      m.add(kReservedPeak, dl, tl.reserved.bytes);
    }
    m.add(kOtherLibraries, dl, b.other_libraries);
    if (tl.has_driver) m.add(kDriverPeak, dl, tl.driver.bytes);
    // The engine drops an NVML sample below tracked + context (taken before what the moment
    // holds): then the driver-visible layers are unknown and have no series.
    if (b.driver_visible) {
      m.add(kDriverVisible, dl, *b.driver_visible);
      if (b.context) {
        m.add(kContext, dl, *b.context);
        m.add(kOtherUntracked, dl, static_cast<uint64_t>(std::max<int64_t>(0, b.other_untracked)));
      } else {
        m.add(kOtherUntracked, dl, static_cast<uint64_t>(std::max<int64_t>(0, b.untracked)));
      }
    }
    // What the bytes are for, in a PyTorch user's terms: tensors by their category, PyTorch's
    // cache apart (the cached_free gauge), other libraries' allocations as "library".
    const auto at = rp.attributed_after(static_cast<std::ptrdiff_t>(rp.trace().size()) - 1);
    std::map<snap::Category, uint64_t> cats;
    for (const auto& a : at.allocations) {
      if (a.category != snap::Category::kNone) cats[a.category] += a.size;
    }
    for (const auto& [c, bytes] : cats) {
      m.add(kCategory, fmt::format("{},category=\"{}\"", dl, snap::category_name(c)), bytes);
    }
    m.add(kTrackedPeak, dl, tl.highest_known().bytes);
    m.add(kLiveAllocations, dl, live.count(d) ? live[d].count : 0);
    m.add(kOoms, dl, ooms.count(d) ? ooms[d] : 0);
  }
}

}  // namespace

const char* metrics_content_type(MetricsFormat f) {
  return f == MetricsFormat::kOpenMetrics ? "application/openmetrics-text; version=1.0.0; "
                                            "charset=utf-8"
                                          : "text/plain; version=0.0.4; charset=utf-8";
}

std::string metrics_text(const std::vector<const snap::Snapshot*>& processes, MetricsFormat f) {
  Metrics m;
  for (const snap::Snapshot* s : processes) {
    if (s && s->tool) add_process(*s, m);
  }
  return m.text(f);
}

}  // namespace cumemtrace::collect
