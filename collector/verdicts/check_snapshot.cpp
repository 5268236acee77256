#include "verdicts/check_snapshot.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include <fmt/format.h>

#include "analysis/analysed_snapshot.h"
#include "analysis/breakdown_format.h"
#include "analysis/frames.h"
#include "analysis/grouping.h"
#include "analysis/model.h"
#include "analysis/range.h"
#include "pytorch/categories.h"
#include "pytorch/ledger.h"
#include "pytorch/modules.h"
#include "pytorch/phases.h"
#include "snapshot/size_format.h"
#include "verdicts/limits.h"
#include "verdicts/process_summary.h"
#include "verdicts/report.h"

namespace cumemtrace::analysis {

using snap::format_bytes;

namespace {

StackNote note_for(const SiteTable& sites, int32_t stack, bool before_trace, std::string title,
                   size_t frames) {
  StackNote n;
  n.title = std::move(title);
  n.lines = stack_lines(sites, stack, before_trace, frames);
  auto pf = sites.program_frames(stack, 1);
  if (!pf.empty()) {
    n.file = pf.front()->filename;
    n.line = pf.front()->line;
  }
  return n;
}

// Stacks under a finding: a single group needs no title (its size is in the message).
void attach_groups(Finding& f, const std::vector<StackGroup>& groups, const SiteTable& sites,
                   const CheckOptions& o) {
  for (size_t i = 0; i < groups.size() && i < o.stacks; ++i) {
    const auto& g = groups[i];
    std::string title = groups.size() == 1 ? std::string()
                                           : fmt::format("{} in {}", format_bytes(g.bytes),
                                                         plural(g.count, "allocation"));
    f.stacks.push_back(note_for(sites, g.stack, g.before_trace, title, o.frames));
  }
  if (groups.size() > o.stacks) f.stacks_omitted = groups.size() - o.stacks;
}

// What was live at a peak, by allocation site: "6.00 MiB live in 2 allocations from SITE".
void attach_sites(Finding& f, const std::vector<Allocation>& live, const SiteTable& sites,
                  const CheckOptions& o) {
  auto at_peak = by_site(live, sites);
  for (size_t i = 0; i < at_peak.size() && i < o.stacks; ++i) {
    const auto& st = at_peak[i];
    f.stacks.push_back(note_for(sites, st.stack, st.site == kBeforeTraceSite,
                                fmt::format("{} live in {} from {}", format_bytes(st.bytes),
                                            plural(st.count, "allocation"), st.site),
                                o.frames));
  }
  if (at_peak.size() > o.stacks) f.stacks_omitted = at_peak.size() - o.stacks;
}

std::vector<int> devices_of(const snap::Snapshot& s) {
  std::vector<int> d;
  const int n = std::max(1, device_count(s));
  for (int i = 0; i < n; ++i) d.push_back(i);
  return d;
}

// The limits `ls` judges (limits.h): a snapshot written while its process ran does not judge
// those that speak of the end (what is still held, growth over the run) outside a --range; it
// says so in one warning, and the snapshot written at the end judges them.
CheckOptions limits_judged_in(const LoadedSnapshot& ls, const CheckOptions& given, CheckResult& r) {
  if (!given.range.empty() || !mid_run_snapshot(ls.snapshot)) return given;
  CheckOptions o = given;
  std::string skipped;
  for (const auto& l : limit_specs()) {
    if (!l.at_end || !(o.*l.member)) continue;
    skipped += fmt::format("{}{}", skipped.empty() ? "" : ", ", l.flag);
    (o.*l.member).reset();
  }
  if (!skipped.empty()) {
    Finding f;
    f.snapshot = ls.path;
    f.check = "written-while-running";
    f.severity = Severity::kWarning;
    f.message = fmt::format(
        "written while the process ran ({}): {} judged in the snapshot written at its end, not "
        "here",
        ls.snapshot.tool->tag.empty() ? ls.snapshot.tool->reason : ls.snapshot.tool->tag, skipped);
    r.findings.push_back(std::move(f));
  }
  return o;
}

// With a capped trace (--max-trace-events) the state is known only from the oldest entry kept
// on: the time of that entry, or nullopt when nothing was dropped. INT64_MAX when every entry
// was dropped.
std::optional<int64_t> kept_trace_start(const snap::Snapshot& s) {
  if (!s.tool || s.tool->trace_entries_dropped == 0) return std::nullopt;
  int64_t t0 = std::numeric_limits<int64_t>::max();
  for (const auto& trace : s.device_traces)
    if (!trace.empty()) t0 = std::min(t0, trace.front().time_us);
  return t0;
}

std::string dropped_marks_why(const snap::Snapshot& s) {
  return *trace_incomplete_why(s);
}
Finding finding(const LoadedSnapshot& ls, std::string check, int device) {
  Finding f;
  f.snapshot = ls.path;
  f.check = std::move(check);
  f.device = device;
  return f;
}

// Its verdict, beside the others': the reader's line without the file's name it starts with.
void note_unreadable(const LoadedSnapshot& ls, CheckResult& r) {
  Finding f = finding(ls, "readable", -1);
  f.severity = Severity::kError;
  std::string_view why = ls.unreadable;
  if (why.substr(0, ls.path.size()) == ls.path) why.remove_prefix(ls.path.size());
  while (!why.empty() && (why.front() == ':' || why.front() == ' ')) why.remove_prefix(1);
  f.message = fmt::format("unreadable, not checked: {}", why);
  f.judged = false;
  r.findings.push_back(std::move(f));
}

// Whether every event was recorded: the limits judge what was.
void judge_complete(const LoadedSnapshot& ls, const CheckOptions& given, CheckResult& r) {
  const snap::ToolSection& t = *ls.snapshot.tool;
  Finding f = finding(ls, "complete", -1);
  f.value = t.events_dropped;
  if (!t.ring_error.empty()) {
    // Not a count that can be allowed: the state after the bad record is unknown.
    f.severity = Severity::kError;
    f.message = fmt::format(
        "incomplete: {}; the {} events before it were recorded, later ones "
        "are missing",
        t.ring_error, t.events_total);
  } else if (t.events_dropped == 0) {
    f.message = fmt::format("all {} events recorded", t.events_total);
  } else if (given.allow_drops) {
    f.severity = Severity::kWarning;
    f.message = fmt::format(
        "incomplete: {} of {} events dropped (allowed by --allow-drops; "
        "numbers undercount)",
        t.events_dropped, t.events_total);
  } else {
    f.severity = Severity::kError;
    f.message = fmt::format(
        "incomplete: {} of {} events dropped, so limits cannot be trusted "
        "(pass --allow-drops to check anyway)",
        t.events_dropped, t.events_total);
  }
  f.judged = f.severity != Severity::kError;  // an incomplete trace judges no limit
  r.findings.push_back(std::move(f));
}

// The one verdict on a process that never used CUDA, for every gate (check, run, the pytest
// plugin): nothing could be measured, so nothing passes unless the caller said it may.
void note_no_cuda(const LoadedSnapshot& ls, const CheckOptions& o, bool others_used_cuda,
                  CheckResult& r) {
  Finding f = finding(ls, "cuda-used", -1);
  f.judged = false;
  if (others_used_cuda) {
    f.severity = Severity::kWarning;
    f.message = "no CUDA allocation seen in this process; its limits are not judged";
  } else if (o.allow_no_cuda) {
    f.severity = Severity::kWarning;
    f.message = "no CUDA allocation seen; nothing to judge (allowed by --allow-no-cuda)";
  } else {
    f.severity = Severity::kError;
    f.message =
        "no CUDA allocation seen (no device memory event, segment or CUDA context): no limit can "
        "be judged (pass --allow-no-cuda if that is expected)";
  }
  r.findings.push_back(std::move(f));
}

// The same verdict for a --range (a pytest test's) in which no device memory event happened: a
// window's numbers are its own (range.h), so whether it used CUDA is too, whatever ran before it
// (a marked test on the CPU fails the same whether or not an earlier test used the GPU).
bool range_used_no_cuda(const snap::Snapshot& s, const std::string& range) {
  const auto w = find_range(s, range);
  if (!w) return false;  // the limits' own finding says what is wrong with the range
  for (const auto& trace : s.device_traces) {
    for (const auto& e : trace) {
      if (e.action != snap::Action::kSnapshot && e.time_us >= w->start_us &&
          e.time_us <= w->end_us) {
        return false;
      }
    }
  }
  return true;
}

void note_no_cuda_in_range(const LoadedSnapshot& ls, const CheckOptions& o, CheckResult& r) {
  Finding f = finding(ls, "cuda-used", -1);
  f.judged = false;
  if (o.allow_no_cuda) {
    f.severity = Severity::kWarning;
    f.message = fmt::format(
        "no CUDA allocation seen within range '{}'; nothing to judge (allowed by --allow-no-cuda)",
        o.range);
  } else {
    f.severity = Severity::kError;
    f.message = fmt::format(
        "no CUDA allocation seen within range '{}' (no device memory event between its start and "
        "end): no limit can be judged (pass --allow-no-cuda if that is expected)",
        o.range);
  }
  r.findings.push_back(std::move(f));
}

void note_anomalies(const LoadedSnapshot& ls, const SiteTable& sites, const CheckOptions& o,
                    CheckResult& r) {
  for (const auto& a : ls.snapshot.tool->anomalies) {
    Finding f = finding(ls, "anomaly", -1);
    f.severity = Severity::kWarning;
    f.message = fmt::format("{} of {:#x} ({})", a.kind, a.addr, a.api);
    f.stacks.push_back(note_for(sites, a.stack, false, "", o.frames));
    r.findings.push_back(std::move(f));
  }
}

// The verdicts' words, one function each, for a snapshot and for its summary alike.
std::string peak_message(uint64_t value, int d, int64_t when, int64_t origin, uint64_t limit) {
  return fmt::format("peak {} on device {} at {} (limit {})", format_bytes(value), d,
                     format_time(when, origin), format_bytes(limit));
}

std::string layer_message(const char* what, uint64_t bytes, int d, const std::string& in_range,
                          int64_t when, int64_t origin, uint64_t limit) {
  return fmt::format("peak {} {} on device {}{} at {} (limit {})", what, format_bytes(bytes), d,
                     in_range, format_time(when, origin), format_bytes(limit));
}

std::string no_layer_message(bool driver, int d) {
  return fmt::format("no {} data on device {}: limit not evaluated",
                     driver ? "driver-visible (NVML)" : "PyTorch", d);
}

std::string leaked_message(uint64_t value, int d, const std::string& in_range, uint64_t count,
                           std::optional<int> ledger_warmup, uint64_t limit) {
  if (ledger_warmup)
    return fmt::format(
        "{} leaked on device {} by {}: tensors allocated after a warm-up of {} that are not "
        "parameters, gradients or optimizer state, and other libraries' memory allocated "
        "after it, still held at the end (limit {})",
        format_bytes(value), d, plural(count, "allocation"),
        plural(static_cast<uint64_t>(*ledger_warmup), "step"), format_bytes(limit));
  return fmt::format("{} leaked on device {}{} by {} (limit {})", format_bytes(value), d, in_range,
                     plural(count, "allocation"), format_bytes(limit));
}

std::string growth_per_step_message(int d, const std::string& in_range, const Growth& g,
                                    uint64_t limit) {
  std::string where;
  if (!g.by_site.empty())
    where = fmt::format(", most at {} ({})", g.by_site.front().site,
                        category_label(g.by_site.front().category));
  return fmt::format(
      "device {}{} grows {} a step{} (tensors of steps {}..{} still live at the end of step "
      "{}, after a warm-up of {}; limit {})",
      d, in_range, format_bytes(g.per_step), where, g.first_counted + 1, g.last_counted + 1,
      g.end_step + 1, plural(static_cast<uint64_t>(g.warmup), "step"), format_bytes(limit));
}

// The moments --max-growth measures between: the user's mark, else the ends of the automatic
// steps; `skip` of them before the first measured one.
struct GrowthMoments {
  std::vector<int64_t> times;
  bool automatic = false;
  size_t skip = 0;
  size_t lost = 0;  // older than the kept trace (--max-trace-events)
};

GrowthMoments growth_moments(const AnalysedSnapshot& view, const CheckOptions& o) {
  const snap::Snapshot& s = view.snapshot();
  GrowthMoments m;
  m.automatic = o.mark.empty();
  if (m.automatic) {
    const Phases& ph = phases_of(view);
    for (const auto& st : ph.steps())
      if (st.complete) m.times.push_back(st.end_us - 1);  // the step's last microsecond
  } else {
    for (const auto& a : s.annotations) {
      if (a.name == o.mark && (a.stage == "START" || a.stage == "MARK"))
        m.times.push_back(a.time_us);
    }
  }
  std::sort(m.times.begin(), m.times.end());
  m.times.erase(std::unique(m.times.begin(), m.times.end()), m.times.end());
  m.skip = static_cast<size_t>(o.warmup);
  // Marks older than the kept trace cannot be measured: the state around them was dropped.
  const auto kept = kept_trace_start(s);
  while (kept && m.lost < m.times.size() && m.times[m.lost] < *kept) ++m.lost;
  return m;
}

// One site's growth between the two moments, and a stack that allocated there.
using SiteGrowth = std::pair<int64_t, StackGroup>;

// What judging one snapshot's limits shares: its devices, their replays (the snapshot's one view:
// analysed_snapshot.h), the --range window and the ledger, each built on first use (a limit not
// given costs nothing).
class SnapshotJudge {
 public:
  SnapshotJudge(const LoadedSnapshot& ls, const CheckOptions& o,
                const std::vector<Suppression>& rules, CheckResult& r)
      : ls_(ls),
        s_(ls.snapshot),
        o_(o),
        rules_(rules),
        r_(r),
        sites_(s_),
        view_(s_),
        devices_(devices_of(s_)) {
    ranges_.resize(devices_.size());
    if (!o.range.empty()) {
      std::string why;
      window_ = find_range(s_, o.range, &why);
      if (!window_) throw RangeNotFound(ls.path + ": " + why);
      in_range_ = fmt::format(" within range '{}'", o.range);
    }
  }

  const SiteTable& sites() const { return sites_; }

  // The limit of `spec`, from limits.h's table.
  void judge(const LimitSpec& spec, uint64_t limit) {
    using Judge = void (SnapshotJudge::*)(uint64_t);
    static constexpr std::pair<std::string_view, Judge> kJudges[] = {
        {"leaked-bytes", &SnapshotJudge::leaked_bytes},
        {"peak-bytes", &SnapshotJudge::peak_bytes},
        {"allocated-peak", &SnapshotJudge::allocated_peak},
        {"reserved-peak", &SnapshotJudge::reserved_peak},
        {"driver-peak", &SnapshotJudge::driver_peak},
        {"growth", &SnapshotJudge::growth},
        {"growth-per-step", &SnapshotJudge::growth_per_step},
        {"module-bytes", &SnapshotJudge::module_bytes},
    };
    for (const auto& [check, judge] : kJudges) {
      if (check == spec.check) return (this->*judge)(limit);
    }
    throw std::logic_error(fmt::format("limits.h's {} has no evaluation in check", spec.flag));
  }

 private:
  Finding base(std::string check, int device) const {
    return finding(ls_, std::move(check), device);
  }

  const DeviceReplay& replay(int d) const { return view_.replay(d); }
  const RangeResult& range_of(int d) {
    auto& p = ranges_[static_cast<size_t>(d)];
    if (!p) p = evaluate_range(replay(d), *window_);
    return *p;
  }
  // The ledger of a PyTorch run with automatic phases (ledger.h): leaks and growth per step in
  // a PyTorch user's terms.
  const std::optional<Ledger>& ledger() {
    if (!ledger_) ledger_ = build_ledger(view_, sites_);
    return *ledger_;
  }
  const DeviceLedger* device_ledger(int d) {
    if (!ledger()) return nullptr;
    for (const auto& dl : ledger()->devices)
      if (dl.device == d) return &dl;
    return nullptr;
  }

  void leaked_bytes(uint64_t limit);
  void peak_bytes(uint64_t limit);
  void allocated_peak(uint64_t limit) { layer_peak(limit, "allocated-peak", "PyTorch allocated"); }
  void reserved_peak(uint64_t limit) { layer_peak(limit, "reserved-peak", "PyTorch reserved"); }
  void driver_peak(uint64_t limit) { layer_peak(limit, "driver-peak", "driver-visible"); }
  void layer_peak(uint64_t limit, const char* check, const char* what);
  Watermark layer_peak_on(int d, bool driver, bool allocated);
  void growth(uint64_t limit);
  void growth_on(int d, const GrowthMoments& m, uint64_t limit);
  std::unordered_map<std::string, SiteGrowth> growth_by_site(const std::vector<Allocation>& first,
                                                             const std::vector<Allocation>& last);
  void growth_per_step(uint64_t limit);
  void module_bytes(uint64_t limit);

  const LoadedSnapshot& ls_;
  const snap::Snapshot& s_;
  const CheckOptions& o_;
  const std::vector<Suppression>& rules_;
  CheckResult& r_;
  const SiteTable sites_;
  const AnalysedSnapshot view_;
  const std::vector<int> devices_;
  std::vector<std::optional<RangeResult>> ranges_;
  std::optional<RangeWindow> window_;
  std::string in_range_;
  std::optional<std::optional<Ledger>> ledger_;
};

void SnapshotJudge::leaked_bytes(uint64_t limit) {
  const auto live = live_at_exit(s_);
  for (int d : devices_) {
    std::vector<Allocation> leaked;
    // A PyTorch run with phases: what a user calls leaked (ledger.h), not the weights.
    const DeviceLedger* dl = window_ ? nullptr : device_ledger(d);
    for (const auto& a : window_ ? range_of(d).leaked : dl ? dl->leaked : live) {
      if (a.device != d) continue;
      if (const Suppression* sup = find_suppression(rules_, SuppressionType::kLeak, s_, a.stack)) {
        ++sup->hits;
        sup->bytes += a.size;
        continue;
      }
      leaked.push_back(a);
    }
    Finding f = base("leaked-bytes", d);
    f.value = total_bytes(leaked);
    f.limit = limit;
    f.message = leaked_message(f.value, d, in_range_, leaked.size(),
                               dl ? std::optional<int>(dl->warmup) : std::nullopt, f.limit);
    if (f.value > f.limit) {
      f.severity = Severity::kError;
      attach_groups(f, by_stack(leaked), sites_, o_);
    }
    r_.findings.push_back(std::move(f));
  }
}

void SnapshotJudge::peak_bytes(uint64_t limit) {
  for (int d : devices_) {
    const auto& rp = replay(d);
    const Timeline& tl = rp.timeline();
    Finding f = base("peak-bytes", d);
    f.limit = limit;
    if (window_) {
      // The window's own peak (range.h): what it allocated, live at once; never what was live
      // at its START, so a pytest test's number does not depend on the tests before it.
      const RangeResult& rr = range_of(d);
      f.value = rr.own.bytes;
      f.message = fmt::format(
          "peak {} allocated on device {}{} at {} (limit {}; {} with what was live at its "
          "start)",
          format_bytes(f.value), d, in_range_, format_time(rr.own.time_us, time_origin(s_)),
          format_bytes(f.limit), format_bytes(rr.peak.bytes));
      if (f.value > f.limit) {
        f.severity = Severity::kError;
        attach_sites(f, rr.own_at_peak, sites_, o_);
      }
      r_.findings.push_back(std::move(f));
      continue;
    }
    // No watermark overrides another (watermark.h): the higher of the trace's and the collector
    // summary's is judged and named; a trace that may have lost its highest point, with no
    // summary that covers it, cannot be judged.
    const auto origin = time_origin(s_);
    const std::optional<std::string> incomplete = trace_incomplete_why(s_);
    if (tl.summary_higher()) {
      f.value = tl.collector_summary->bytes;
      f.message = fmt::format(
          "peak {} on device {} at {} (limit {}; the collector's summary of all events, the trace "
          "holds {})",
          format_bytes(f.value), d, format_time(tl.collector_summary->time_us, origin),
          format_bytes(f.limit), format_bytes(tl.trace.bytes));
    } else if (incomplete && !tl.collector_summary) {
      f.value = tl.trace.bytes;
      f.judged = false;
      f.severity = Severity::kError;
      f.message = fmt::format(
          "--max-peak-bytes cannot be judged on device {}: {}, and no collector summary of all "
          "events covers them (the trace's highest point is {} at {})",
          d, *incomplete, format_bytes(tl.trace.bytes), format_time(tl.trace.time_us, origin));
      r_.findings.push_back(std::move(f));
      continue;
    } else {
      f.value = tl.trace.bytes;
      f.message = peak_message(f.value, d, tl.trace.time_us, origin, f.limit);
    }
    if (f.value > f.limit) {
      f.severity = Severity::kError;
      // PyTorch's memory by its tensors; its cache is no site's (model.h Attributed). The sites
      // are those of the trace's highest point, the only moment of the run the file holds.
      const Attributed parts = rp.attributed_after(tl.trace.index);
      if (tl.summary_higher())
        f.message += fmt::format("; at the trace's highest point, {}:",
                                 format_time(tl.trace.time_us, origin));
      if (parts.has_cache)
        f.message +=
            fmt::format("; {} of it {}", format_bytes(parts.cached_free), kCachedFreeLabel);
      attach_sites(f, parts.allocations, sites_, o_);
    }
    r_.findings.push_back(std::move(f));
  }
}

// Peaks of one layer (model.h), over the whole run or within the range.
void SnapshotJudge::layer_peak(uint64_t limit, const char* check, const char* what) {
  const bool driver = std::string_view(check) == "driver-peak";
  const bool allocated = std::string_view(check) == "allocated-peak";
  auto has_layer = [&](int d) {
    const Timeline& tl = replay(d).timeline();
    return driver ? tl.has_driver : tl.has_reserved;
  };
  // A gate that could not judge fails: no device has the layer (a program without PyTorch,
  // a host without NVML). A device without it beside one with it (NCCL's buffers on a
  // PyTorch rank's device) is only noted.
  const bool judged = std::any_of(devices_.begin(), devices_.end(), has_layer);
  if (!judged) {
    Finding f = base(check, -1);
    f.limit = limit;
    f.judged = false;
    f.severity = Severity::kError;
    f.message = fmt::format(
        "{} cannot be judged: {}", flag_of_check(check),
        driver ? "the snapshot has no driver-visible (NVML) data (NVML was not found when it ran)"
               : "the snapshot has no allocator data (the program used neither PyTorch's "
                 "caching allocator nor a memory pool)");
    r_.findings.push_back(std::move(f));
    return;
  }
  for (int d : devices_) {
    Finding f = base(check, d);
    f.limit = limit;
    if (!has_layer(d)) {
      f.severity = Severity::kWarning;
      f.message = no_layer_message(driver, d);
      r_.findings.push_back(std::move(f));
      continue;
    }
    const Watermark peak = layer_peak_on(d, driver, allocated);
    f.value = peak.bytes;
    f.message =
        layer_message(what, peak.bytes, d, in_range_, peak.time_us, time_origin(s_), f.limit);
    if (peak.bytes > f.limit) {
      f.severity = Severity::kError;
      // The same breakdown as --max-peak-bytes: the tensors live at that moment by site, and for
      // the reserved layer PyTorch's cache beside them (model.h Attributed).
      if (!driver) {
        Attributed parts = replay(d).attributed_after(peak.index);
        std::erase_if(parts.allocations, [](const Allocation& a) { return !a.pytorch; });
        if (!allocated && parts.has_cache)
          f.message +=
              fmt::format("; {} of it {}", format_bytes(parts.cached_free), kCachedFreeLabel);
        attach_sites(f, parts.allocations, sites_, o_);
      }
    }
    r_.findings.push_back(std::move(f));
  }
}

// The layer's highest value on device `d` and when, over the run or within the range.
Watermark SnapshotJudge::layer_peak_on(int d, bool driver, bool allocated) {
  return analysis::layer_peak(replay(d), s_, d, driver, allocated, window_);
}

void SnapshotJudge::growth(uint64_t limit) {
  GrowthMoments m = growth_moments(view_, o_);
  if (m.lost > m.skip && m.times.size() >= m.skip + 2) {
    // Every compared mark fell before the kept trace: said once.
    if (m.times.size() - m.lost < 2) {
      Finding f = base("growth", -1);
      f.judged = false;
      f.severity = Severity::kError;
      f.limit = limit;
      f.message = fmt::format(
          "--max-growth cannot be judged: {} of the {} {} it compares fell before the kept "
          "trace ({})",
          m.lost, m.times.size(),
          m.automatic ? "automatic step ends" : fmt::format("occurrences of mark '{}'", o_.mark),
          dropped_marks_why(s_));
      r_.findings.push_back(std::move(f));
      return;
    }
    m.skip = m.lost;  // measured inside the kept window (the message says from which occurrence)
  }
  if (m.times.size() < m.skip + 2) {
    Finding f = base("growth", -1);
    f.severity = Severity::kError;
    f.limit = limit;
    const std::string found =
        m.automatic ? fmt::format("{} automatic {} complete", m.times.size(),
                                  m.times.size() == 1 ? "step is" : "steps are")
                    : fmt::format("mark '{}' occurs {}", o_.mark, plural(m.times.size(), "time"));
    f.message = fmt::format(
        "{}; --max-growth with --warmup {} needs at least {}{}", found, o_.warmup, m.skip + 2,
        m.automatic && m.times.empty() ? " (the snapshot has no automatic steps: give --mark NAME)"
                                       : "");
    r_.findings.push_back(std::move(f));
    return;
  }
  for (int d : devices_) growth_on(d, m, limit);
}

// Growth per site, suppressed allocations left out of both ends.
std::unordered_map<std::string, SiteGrowth> SnapshotJudge::growth_by_site(
    const std::vector<Allocation>& first, const std::vector<Allocation>& last) {
  std::unordered_map<std::string, SiteGrowth> per_site;
  auto fold = [&](const std::vector<Allocation>& v, int sign) {
    for (const auto& a : v) {
      if (const Suppression* sup =
              find_suppression(rules_, SuppressionType::kGrowth, s_, a.stack)) {
        if (sign > 0) {
          ++sup->hits;
          sup->bytes += a.size;
        }
        continue;
      }
      auto& e = per_site[site_label(a, sites_)];
      e.first = sign > 0 ? wrap_add(e.first, static_cast<int64_t>(a.size))
                         : wrap_sub(e.first, static_cast<int64_t>(a.size));
      e.second.count += sign > 0 ? 1 : 0;
      if (e.second.stack == snap::kNoStack) {
        e.second.stack = a.stack;
        e.second.before_trace = a.before_trace;
      }
    }
  };
  fold(first, -1);
  fold(last, +1);
  return per_site;
}

// The live units --max-growth compares at a moment. Between automatic step ends PyTorch's
// memory is its tensors (DeviceReplay::attributed_after: each at the site that allocated it, the
// blame --max-growth-per-step gives; a segment would be blamed on whichever op triggered its
// cudaMalloc, often a backward node) beside other libraries' allocations; PyTorch's cache, which
// no line holds, is not growth. With the user's --mark, or without PyTorch's blocks, every live
// unit as recorded.
std::vector<Allocation> growth_units(const DeviceReplay& rp, std::ptrdiff_t index, bool tensors) {
  if (!tensors || !rp.splits_tensors()) return rp.live_after(index);
  return rp.attributed_after(index).allocations;
}

void SnapshotJudge::growth_on(int d, const GrowthMoments& m, uint64_t limit) {
  const auto& rp = replay(d);
  const auto first = growth_units(rp, rp.index_at_time(m.times[m.skip]), m.automatic);
  const auto last = growth_units(rp, rp.index_at_time(m.times.back()), m.automatic);
  int64_t growth = 0;
  std::vector<std::pair<std::string, SiteGrowth>> grown;
  for (auto& [site, e] : growth_by_site(first, last)) {
    growth = wrap_add(growth, e.first);
    if (e.first > 0) grown.emplace_back(site, e);
  }
  std::sort(grown.begin(), grown.end(), [](const auto& a, const auto& b) {
    if (a.second.first != b.second.first) return a.second.first > b.second.first;
    return a.first < b.first;
  });
  Finding f = base("growth", d);
  f.value = growth > 0 ? static_cast<uint64_t>(growth) : 0;
  f.limit = limit;
  f.message = fmt::format(
      "live bytes on device {} grew by {} between {} ({} -> {}; limit {})", d,
      snap::format_signed_bytes(growth),
      m.automatic
          ? fmt::format("the ends of automatic steps {} and {}", m.skip + 1, m.times.size())
          : fmt::format("occurrences {} and {} of mark '{}'", m.skip + 1, m.times.size(), o_.mark),
      format_bytes(total_bytes(first)), format_bytes(total_bytes(last)), format_bytes(f.limit));
  if (m.lost > static_cast<size_t>(o_.warmup))
    f.message +=
        fmt::format(" (the {} before fell before the kept trace: {})",
                    plural(m.lost, m.automatic ? "step end" : "occurrence"), dropped_marks_why(s_));
  if (growth > 0 && static_cast<uint64_t>(growth) > f.limit) {
    f.severity = Severity::kError;
    for (size_t i = 0; i < grown.size() && i < o_.stacks; ++i) {
      const auto& [site, e] = grown[i];
      f.stacks.push_back(note_for(
          sites_, e.second.stack, e.second.before_trace,
          fmt::format("{} grew at {}", snap::format_signed_bytes(e.first), site), o_.frames));
    }
    if (grown.size() > o_.stacks) f.stacks_omitted = grown.size() - o_.stacks;
  }
  r_.findings.push_back(std::move(f));
}

void SnapshotJudge::growth_per_step(uint64_t limit) {
  // A gate that could not judge never passes: no automatic steps, or too few, is a failure.
  if (!ledger() || ledger()->devices.empty()) {
    Finding f = base("growth-per-step", -1);
    f.judged = false;
    f.severity = Severity::kError;
    f.limit = limit;
    f.message =
        "growth per step cannot be judged: the snapshot has no automatic steps (a PyTorch run "
        "under cumemtrace with the automatic phases, docs/pytorch.md) with PyTorch tensors";
    r_.findings.push_back(std::move(f));
  }
  for (const auto& dl : ledger() ? ledger()->devices : std::vector<DeviceLedger>{}) {
    Growth windowed;
    if (window_) {  // the steps that end within the range (a pytest test's)
      const Phases& phases = phases_of(view_);
      windowed = analysis::growth_per_step(phases, replay(dl.device),
                                           device_tensors(s_, dl.device, phases), sites_,
                                           window_->start_us, window_->end_us);
    }
    const Growth& g = window_ ? windowed : dl.growth;
    Finding f = base("growth-per-step", dl.device);
    f.limit = limit;
    if (!g.judged) {
      f.judged = false;
      f.severity = Severity::kError;
      f.message = fmt::format("growth per step on device {}{} cannot be judged: {}", dl.device,
                              in_range_, g.why);
      r_.findings.push_back(std::move(f));
      continue;
    }
    f.value = g.per_step;
    f.message = growth_per_step_message(dl.device, in_range_, g, f.limit);
    if (g.per_step > f.limit) {
      f.severity = Severity::kError;
      for (size_t i = 0; i < g.by_site.size() && i < o_.stacks; ++i) {
        const auto& sb = g.by_site[i];
        f.stacks.push_back(note_for(
            sites_, sb.stack, false,
            fmt::format("grows {} a step at {} ({})", format_bytes(static_cast<uint64_t>(sb.bytes)),
                        sb.site, category_label(sb.category)),
            o_.frames));
      }
      if (g.by_site.size() > o_.stacks) f.stacks_omitted = g.by_site.size() - o_.stacks;
    }
    r_.findings.push_back(std::move(f));
  }
}

void SnapshotJudge::module_bytes(uint64_t limit) {
  Finding f = base("module-bytes", -1);
  f.limit = limit;
  std::string why;
  const auto view = window_ ? std::nullopt : build_module_view(view_, o_.module_depth, &why);
  if (!view) {
    // A gate that could not judge never passes.
    f.judged = false;
    f.severity = Severity::kError;
    f.message =
        fmt::format("module bytes cannot be judged: {}",
                    window_ ? "the by-module view is the whole run's, not a --range's" : why);
    r_.findings.push_back(std::move(f));
    return;
  }
  std::vector<const ModuleRow*> over;
  const ModuleRow* largest = nullptr;
  for (const auto& row : view->rows) {
    if (row.module.starts_with('(') && row.module != kRootModule) continue;  // no module
    if (!largest || row.total() > largest->total()) largest = &row;
    if (row.total() > limit) over.push_back(&row);
  }
  auto describe = [&](const ModuleRow& r) {
    return fmt::format(
        "module {} holds {} (parameters {}, gradients {}, optimizer state {}, activations {})",
        r.module, format_bytes(r.total()), format_bytes(r.parameters), format_bytes(r.gradients),
        format_bytes(r.optimizer_state), format_bytes(r.activations));
  };
  f.value = largest ? largest->total() : 0;
  f.message = fmt::format("{} at the {} (depth {}; limit {})",
                          largest ? describe(*largest) : std::string("no module holds memory"),
                          view->reference, view->depth, format_bytes(limit));
  if (!over.empty()) {
    f.severity = Severity::kError;
    f.message = fmt::format("{} over the limit at depth {} at the {}: {} (limit {})",
                            plural(over.size(), "module"), view->depth, view->reference,
                            describe(*over.front()), format_bytes(limit));
    for (size_t i = 0; i < over.size() && i < o_.stacks; ++i) {
      StackNote n;
      n.lines.push_back(describe(*over[i]));
      f.stacks.push_back(std::move(n));
    }
    if (over.size() > o_.stacks) f.stacks_omitted = over.size() - o_.stacks;
  }
  r_.findings.push_back(std::move(f));
}

}  // namespace

namespace {

const char* layer_what(std::string_view check) {
  return check == "allocated-peak"  ? "PyTorch allocated"
         : check == "reserved-peak" ? "PyTorch reserved"
                                    : "driver-visible";
}

const std::optional<LayerPeakMeasure>& layer_of(const DeviceLimits& l, std::string_view check) {
  return check == "allocated-peak" ? l.allocated : check == "reserved-peak" ? l.reserved : l.driver;
}

// Check's devices (0..device_count-1), each the summary's; empty when one is missing.
std::vector<const DeviceSummary*> summary_devices(const ProcessSummary& p) {
  std::vector<const DeviceSummary*> out;
  for (int d = 0; d < std::max(1, p.device_count); ++d) {
    const auto it = std::find_if(p.devices.begin(), p.devices.end(),
                                 [&](const DeviceSummary& x) { return x.device == d; });
    if (it == p.devices.end()) return {};
    out.push_back(&*it);
  }
  return out;
}

// The findings of a process judged from its summary (summary_judges said it can be): the same as
// check_snapshot gives its snapshot, each limit through the same words.
void check_summary(const LoadedSnapshot& ls, const CheckOptions& given, CheckResult& r) {
  const ProcessSummary& p = *ls.summary;
  judge_complete(ls, given, r);
  const CheckOptions o = limits_judged_in(ls, given, r);
  const auto devices = summary_devices(p);
  for (const auto& spec : limit_specs()) {
    const auto& limit = o.*spec.member;
    if (!limit) continue;
    const std::string_view check = spec.check;
    auto base = [&](int d) {
      Finding f = finding(ls, std::string(check), d);
      f.limit = *limit;
      return f;
    };
    if (check == "peak-bytes") {
      for (const DeviceSummary* d : devices) {
        Finding f = base(d->device);
        f.value = d->peak_bytes;
        f.message = peak_message(f.value, d->device, d->peak_time_us, p.time_origin_us, f.limit);
        r.findings.push_back(std::move(f));
      }
    } else if (check == "allocated-peak" || check == "reserved-peak" || check == "driver-peak") {
      for (const DeviceSummary* d : devices) {
        Finding f = base(d->device);
        const auto& m = layer_of(d->limits, check);
        if (!m) {
          f.severity = Severity::kWarning;
          f.message = no_layer_message(check == "driver-peak", d->device);
        } else {
          f.value = m->bytes;
          f.message = layer_message(layer_what(check), m->bytes, d->device, "", m->time_us,
                                    p.time_origin_us, f.limit);
        }
        r.findings.push_back(std::move(f));
      }
    } else if (check == "leaked-bytes") {
      for (const DeviceSummary* d : devices) {
        Finding f = base(d->device);
        f.value = d->limits.leaked_bytes;
        f.message = leaked_message(f.value, d->device, "", d->limits.leaked_count,
                                   d->limits.leaked_warmup, f.limit);
        r.findings.push_back(std::move(f));
      }
    } else if (check == "growth-per-step") {
      for (const DeviceSummary& d : p.devices) {
        if (!d.growth) continue;
        Finding f = base(d.device);
        f.value = d.growth->per_step;
        f.message = growth_per_step_message(d.device, "", *d.growth, f.limit);
        r.findings.push_back(std::move(f));
      }
    } else {
      throw std::logic_error(fmt::format("{} is not judged from a summary", spec.flag));
    }
  }
}

}  // namespace

bool summary_judges(const LoadedSnapshot& ls, const CheckOptions& o) {
  if (!ls.summary || !ls.summary->tool || !o.range.empty() || !o.suppressions.empty() ||
      o.max_growth)
    return false;
  const ProcessSummary& p = *ls.summary;
  const snap::ToolSection& t = *p.tool;
  if (!p.used_cuda || p.anomalies || mid_run_snapshot(ls.snapshot) || !t.ring_error.empty() ||
      (t.events_dropped && !o.allow_drops))
    return false;
  // A capped trace: its peak is judged from the snapshot, naming whose watermark it is.
  if (o.max_peak_bytes && t.trace_entries_dropped) return false;
  const auto devices = summary_devices(p);
  if (devices.empty()) return false;
  for (const auto& spec : limit_specs()) {
    const auto& limit = o.*spec.member;
    if (!limit) continue;
    const std::string_view check = spec.check;
    if (check == "peak-bytes") {
      for (const DeviceSummary* d : devices)
        if (d->peak_bytes > *limit) return false;
    } else if (check == "allocated-peak" || check == "reserved-peak" || check == "driver-peak") {
      bool any = false;
      for (const DeviceSummary* d : devices) {
        const auto& m = layer_of(d->limits, check);
        if (!m) continue;
        any = true;
        if (m->bytes > *limit) return false;
      }
      if (!any) return false;  // not judged: said from the snapshot
    } else if (check == "leaked-bytes") {
      for (const DeviceSummary* d : devices)
        if (d->limits.leaked_bytes > *limit) return false;
    } else if (check == "growth-per-step") {
      bool any = false;
      for (const DeviceSummary& d : p.devices) {
        if (!d.growth) continue;
        any = true;
        if (!d.growth->judged || d.growth->per_step > *limit) return false;
      }
      if (!any) return false;
    } else {
      return false;
    }
  }
  return true;
}

void check_snapshot(const LoadedSnapshot& ls, const CheckOptions& given,
                    const std::vector<Suppression>& rules, CheckResult& r, bool others_used_cuda) {
  if (!ls.unreadable.empty()) return note_unreadable(ls, r);
  if (ls.summary) {
    if (!summary_judges(ls, given))
      throw std::logic_error(ls.path + ": a summary given where its snapshot is needed");
    return check_summary(ls, given, r);
  }
  // The range's verdict first: the same words whether or not the process used CUDA before it.
  if (!given.range.empty() && range_used_no_cuda(ls.snapshot, given.range))
    return note_no_cuda_in_range(ls, given, r);
  if (snap::never_used_cuda(ls.snapshot)) return note_no_cuda(ls, given, others_used_cuda, r);
  if (ls.snapshot.tool) judge_complete(ls, given, r);
  const CheckOptions o = limits_judged_in(ls, given, r);
  SnapshotJudge judge(ls, o, rules, r);
  for (const auto& l : limit_specs()) {
    if (const auto& limit = o.*l.member) judge.judge(l, *limit);
  }
  if (ls.snapshot.tool) note_anomalies(ls, judge.sites(), o, r);
}

}  // namespace cumemtrace::analysis
