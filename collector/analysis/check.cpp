#include "analysis/check.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/breakdown_format.h"
#include "analysis/categories.h"
#include "analysis/frames.h"
#include "analysis/github.h"
#include "analysis/grouping.h"
#include "analysis/junit.h"
#include "analysis/ledger.h"
#include "analysis/model.h"
#include "analysis/phases.h"
#include "analysis/range.h"
#include "analysis/report.h"
#include "analysis/suppressions.h"
#include "io/file_output.h"
#include "snapshot/size_format.h"

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

std::vector<int> devices_of(const snap::Snapshot& s) {
  std::vector<int> d;
  const int n = std::max(1, device_count(s));
  for (int i = 0; i < n; ++i) d.push_back(i);
  return d;
}

void check_one(const LoadedSnapshot& ls, const CheckOptions& o,
               const std::vector<Suppression>& rules, CheckResult& r) {
  const snap::Snapshot& s = ls.snapshot;
  const SiteTable sites(s);
  auto base = [&](std::string check, int device) {
    Finding f;
    f.snapshot = ls.path;
    f.check = std::move(check);
    f.device = device;
    return f;
  };

  if (s.tool) {
    Finding f = base("complete", -1);
    f.value = s.tool->events_dropped;
    if (!s.tool->ring_error.empty()) {
      // Not a count that can be allowed: the state after the bad record is unknown.
      f.severity = Severity::kError;
      f.message = fmt::format(
          "incomplete: {}; the {} events before it were recorded, later ones "
          "are missing",
          s.tool->ring_error, s.tool->events_total);
    } else if (s.tool->events_dropped == 0) {
      f.message = fmt::format("all {} events recorded", s.tool->events_total);
    } else if (o.allow_drops) {
      f.severity = Severity::kWarning;
      f.message = fmt::format(
          "incomplete: {} of {} events dropped (allowed by --allow-drops; "
          "numbers undercount)",
          s.tool->events_dropped, s.tool->events_total);
    } else {
      f.severity = Severity::kError;
      f.message = fmt::format(
          "incomplete: {} of {} events dropped, so limits cannot be trusted "
          "(pass --allow-drops to check anyway)",
          s.tool->events_dropped, s.tool->events_total);
    }
    r.findings.push_back(std::move(f));
  }

  const auto devices = devices_of(s);
  std::vector<std::unique_ptr<DeviceReplay>> replays;
  auto replay = [&](int d) -> const DeviceReplay& {
    if (replays.empty()) replays.resize(devices.size());
    auto& p = replays[static_cast<size_t>(d)];
    if (!p) p = std::make_unique<DeviceReplay>(s, d);
    return *p;
  };

  std::optional<RangeWindow> window;
  std::string in_range;
  if (!o.range.empty()) {
    std::string why;
    window = find_range(s, o.range, &why);
    if (!window) throw RangeNotFound(ls.path + ": " + why);
    in_range = fmt::format(" within range '{}'", o.range);
  }
  // The ledger of a PyTorch run with automatic phases (ledger.h): leaks and growth per step in
  // a PyTorch user's terms.
  std::optional<std::optional<Ledger>> ledger_cache;
  auto ledger = [&]() -> const std::optional<Ledger>& {
    if (!ledger_cache) ledger_cache = build_ledger(s, sites);
    return *ledger_cache;
  };
  auto device_ledger = [&](int d) -> const DeviceLedger* {
    if (!ledger()) return nullptr;
    for (const auto& dl : ledger()->devices)
      if (dl.device == d) return &dl;
    return nullptr;
  };

  std::vector<std::optional<RangeResult>> ranges(devices.size());
  auto range_of = [&](int d) -> const RangeResult& {
    auto& p = ranges[static_cast<size_t>(d)];
    if (!p) p = evaluate_range(replay(d), *window);
    return *p;
  };

  if (o.max_leaked_bytes) {
    const auto live = live_at_exit(s);
    for (int d : devices) {
      std::vector<Allocation> leaked;
      // A PyTorch run with phases: what a user calls leaked (ledger.h), not the weights.
      const DeviceLedger* dl = window ? nullptr : device_ledger(d);
      for (const auto& a : window ? range_of(d).leaked : dl ? dl->leaked : live) {
        if (a.device != d) continue;
        if (const Suppression* sup = find_suppression(rules, SuppressionType::kLeak, s, a.stack)) {
          ++sup->hits;
          sup->bytes += a.size;
          continue;
        }
        leaked.push_back(a);
      }
      Finding f = base("leaked-bytes", d);
      f.value = total_bytes(leaked);
      f.limit = *o.max_leaked_bytes;
      f.message = fmt::format("{} leaked on device {}{} by {} (limit {})", format_bytes(f.value), d,
                              in_range, plural(leaked.size(), "allocation"), format_bytes(f.limit));
      if (dl) {
        f.message = fmt::format(
            "{} leaked on device {} by {}: tensors allocated after a warm-up of {} that are not "
            "parameters, gradients or optimizer state, and other libraries' memory allocated "
            "after it, still held at the end (limit {})",
            format_bytes(f.value), d, plural(leaked.size(), "allocation"),
            plural(static_cast<uint64_t>(dl->warmup), "step"), format_bytes(f.limit));
      }
      if (f.value > f.limit) {
        f.severity = Severity::kError;
        attach_groups(f, by_stack(leaked), sites, o);
      }
      r.findings.push_back(std::move(f));
    }
  }

  if (o.max_peak_bytes) {
    for (int d : devices) {
      const auto& rp = replay(d);
      const Timeline& tl = rp.timeline();
      Finding f = base("peak-bytes", d);
      f.value = window ? range_of(d).peak_bytes : tl.peak_bytes;
      const int64_t when = window ? range_of(d).peak_time_us : tl.peak_time_us;
      const std::ptrdiff_t index = window ? range_of(d).peak_index : tl.peak_index;
      f.limit = *o.max_peak_bytes;
      f.message = fmt::format("peak {} on device {}{} at {} (limit {})", format_bytes(f.value), d,
                              in_range, format_time(when, time_origin(s)), format_bytes(f.limit));
      if (f.value > f.limit) {
        f.severity = Severity::kError;
        // PyTorch's memory by its tensors; its cache is no site's (model.h Attributed).
        const Attributed parts = rp.attributed_after(index);
        if (parts.has_cache)
          f.message +=
              fmt::format("; {} of it {}", format_bytes(parts.cached_free), kCachedFreeLabel);
        auto at_peak = by_site(parts.allocations, sites);
        for (size_t i = 0; i < at_peak.size() && i < o.stacks; ++i) {
          const auto& st = at_peak[i];
          f.stacks.push_back(note_for(sites, st.stack, st.site == kBeforeTraceSite,
                                      fmt::format("{} live in {} from {}", format_bytes(st.bytes),
                                                  plural(st.count, "allocation"), st.site),
                                      o.frames));
        }
        if (at_peak.size() > o.stacks) f.stacks_omitted = at_peak.size() - o.stacks;
      }
      r.findings.push_back(std::move(f));
    }
  }

  // Peaks of one layer (model.h), over the whole run or within the range.
  struct Layer {
    const std::optional<uint64_t>& limit;
    const char* check;
    const char* what;
  };
  for (const Layer& layer : {Layer{o.max_allocated_peak, "allocated-peak", "PyTorch allocated"},
                             Layer{o.max_reserved_peak, "reserved-peak", "PyTorch reserved"},
                             Layer{o.max_driver_peak, "driver-peak", "driver-visible"}}) {
    if (!layer.limit) continue;
    const bool driver = std::string_view(layer.check) == "driver-peak";
    const bool allocated = std::string_view(layer.check) == "allocated-peak";
    for (int d : devices) {
      const auto& rp = replay(d);
      const Timeline& tl = rp.timeline();
      Finding f = base(layer.check, d);
      f.limit = *layer.limit;
      if (driver ? !tl.has_driver : !tl.has_reserved) {
        f.severity = Severity::kWarning;
        f.message = fmt::format("no {} data on device {}: limit not evaluated",
                                driver ? "driver-visible (NVML)" : "PyTorch", d);
        r.findings.push_back(std::move(f));
        continue;
      }
      int64_t t0 = std::numeric_limits<int64_t>::min(), t1 = std::numeric_limits<int64_t>::max();
      if (window) t0 = window->start_us, t1 = window->end_us;
      uint64_t peak = 0;
      int64_t when = 0;
      if (driver) {
        // The sample in force at t0 counts too: it held when the window opened.
        if (auto v = rp.driver_at(t0)) peak = *v, when = t0;
        for (const auto& m : s.tool->driver_memory) {
          if (m.device == d && m.time_us >= t0 && m.time_us <= t1 && m.used_bytes > peak)
            peak = m.used_bytes, when = m.time_us;
        }
      } else {
        const std::ptrdiff_t first = window ? rp.index_at_time(t0) : -1;
        const std::ptrdiff_t last =
            window ? rp.index_at_time(t1) : static_cast<std::ptrdiff_t>(rp.trace().size()) - 1;
        for (std::ptrdiff_t i = first; i <= last; ++i) {
          const uint64_t v = allocated ? rp.allocated_after(i) : rp.reserved_after(i);
          if (v > peak || i == first) peak = v, when = rp.time_after(i);
        }
      }
      f.value = peak;
      f.message =
          fmt::format("peak {} {} on device {}{} at {} (limit {})", layer.what, format_bytes(peak),
                      d, in_range, format_time(when, time_origin(s)), format_bytes(f.limit));
      if (peak > f.limit) f.severity = Severity::kError;
      r.findings.push_back(std::move(f));
    }
  }

  if (o.max_growth) {
    // The moments measured between: the user's mark, else the ends of the automatic steps.
    std::vector<int64_t> times;
    const bool automatic = o.mark.empty();
    if (automatic) {
      const Phases ph(s);
      for (const auto& st : ph.steps())
        if (st.complete) times.push_back(st.end_us - 1);  // the step's last microsecond
    } else {
      for (const auto& a : s.annotations) {
        if (a.name == o.mark && (a.stage == "START" || a.stage == "MARK"))
          times.push_back(a.time_us);
      }
    }
    std::sort(times.begin(), times.end());
    times.erase(std::unique(times.begin(), times.end()), times.end());
    const size_t skip = static_cast<size_t>(o.warmup);
    if (times.size() < skip + 2) {
      Finding f = base("growth", -1);
      f.severity = Severity::kError;
      f.limit = *o.max_growth;
      const std::string found =
          automatic ? fmt::format("{} automatic {} complete", times.size(),
                                  times.size() == 1 ? "step is" : "steps are")
                    : fmt::format("mark '{}' occurs {}", o.mark, plural(times.size(), "time"));
      f.message = fmt::format(
          "{}; --max-growth with --warmup {} needs at least {}{}", found, o.warmup, skip + 2,
          automatic && times.empty() ? " (the snapshot has no automatic steps: give --mark NAME)"
                                     : "");
      r.findings.push_back(std::move(f));
    } else {
      const int64_t t_first = times[skip];
      const int64_t t_last = times.back();
      for (int d : devices) {
        const auto& rp = replay(d);
        const auto first = rp.live_after(rp.index_at_time(t_first));
        const auto last = rp.live_after(rp.index_at_time(t_last));
        // Growth per site, suppressed allocations left out of both ends.
        std::unordered_map<std::string, std::pair<int64_t, StackGroup>> per_site;
        auto fold = [&](const std::vector<Allocation>& v, int sign) {
          for (const auto& a : v) {
            if (const Suppression* sup =
                    find_suppression(rules, SuppressionType::kGrowth, s, a.stack)) {
              if (sign > 0) {
                ++sup->hits;
                sup->bytes += a.size;
              }
              continue;
            }
            auto& e = per_site[site_label(a, sites)];
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
        int64_t growth = 0;
        std::vector<std::pair<std::string, std::pair<int64_t, StackGroup>>> grown;
        for (auto& [site, e] : per_site) {
          growth = wrap_add(growth, e.first);
          if (e.first > 0) grown.emplace_back(site, e);
        }
        std::sort(grown.begin(), grown.end(), [](const auto& a, const auto& b) {
          if (a.second.first != b.second.first) return a.second.first > b.second.first;
          return a.first < b.first;
        });
        Finding f = base("growth", d);
        f.value = growth > 0 ? static_cast<uint64_t>(growth) : 0;
        f.limit = *o.max_growth;
        f.message = fmt::format(
            "live bytes on device {} grew by {} between {} ({} -> {}; limit {})", d,
            snap::format_signed_bytes(growth),
            automatic
                ? fmt::format("the ends of automatic steps {} and {}", skip + 1, times.size())
                : fmt::format("occurrences {} and {} of mark '{}'", skip + 1, times.size(), o.mark),
            format_bytes(total_bytes(first)), format_bytes(total_bytes(last)),
            format_bytes(f.limit));
        if (growth > 0 && static_cast<uint64_t>(growth) > f.limit) {
          f.severity = Severity::kError;
          for (size_t i = 0; i < grown.size() && i < o.stacks; ++i) {
            const auto& [site, e] = grown[i];
            f.stacks.push_back(note_for(
                sites, e.second.stack, e.second.before_trace,
                fmt::format("{} grew at {}", snap::format_signed_bytes(e.first), site), o.frames));
          }
          if (grown.size() > o.stacks) f.stacks_omitted = grown.size() - o.stacks;
        }
        r.findings.push_back(std::move(f));
      }
    }
  }

  if (o.max_growth_per_step) {
    // A gate that could not judge never passes: no automatic steps, or too few, is a failure.
    if (!ledger() || ledger()->devices.empty()) {
      Finding f = base("growth-per-step", -1);
      f.severity = Severity::kError;
      f.limit = *o.max_growth_per_step;
      f.message =
          "growth per step cannot be judged: the snapshot has no automatic steps (a PyTorch run "
          "under cumemtrace with the automatic phases, docs/pytorch.md) with PyTorch tensors";
      r.findings.push_back(std::move(f));
    }
    std::optional<Phases> phases;
    for (const auto& dl : ledger() ? ledger()->devices : std::vector<DeviceLedger>{}) {
      Growth windowed;
      if (window) {  // the steps that end within the range (a pytest test's)
        if (!phases) phases.emplace(s);
        windowed =
            growth_per_step(*phases, replay(dl.device), device_tensors(s, dl.device, *phases),
                            sites, window->start_us, window->end_us);
      }
      const Growth& g = window ? windowed : dl.growth;
      Finding f = base("growth-per-step", dl.device);
      f.limit = *o.max_growth_per_step;
      if (!g.judged) {
        f.severity = Severity::kError;
        f.message = fmt::format("growth per step on device {}{} cannot be judged: {}", dl.device,
                                in_range, g.why);
        r.findings.push_back(std::move(f));
        continue;
      }
      f.value = g.per_step;
      std::string where;
      if (!g.by_site.empty())
        where = fmt::format(", most at {} ({})", g.by_site.front().site,
                            category_label(g.by_site.front().category));
      f.message = fmt::format(
          "device {}{} grows {} a step{} (tensors of steps {}..{} still live at the end of step "
          "{}, after a warm-up of {}; limit {})",
          dl.device, in_range, format_bytes(g.per_step), where, g.first_counted + 1,
          g.last_counted + 1, g.end_step + 1, plural(static_cast<uint64_t>(g.warmup), "step"),
          format_bytes(f.limit));
      if (g.per_step > f.limit) {
        f.severity = Severity::kError;
        for (size_t i = 0; i < g.by_site.size() && i < o.stacks; ++i) {
          const auto& sb = g.by_site[i];
          f.stacks.push_back(note_for(sites, sb.stack, false,
                                      fmt::format("grows {} a step at {} ({})",
                                                  format_bytes(static_cast<uint64_t>(sb.bytes)),
                                                  sb.site, category_label(sb.category)),
                                      o.frames));
        }
        if (g.by_site.size() > o.stacks) f.stacks_omitted = g.by_site.size() - o.stacks;
      }
      r.findings.push_back(std::move(f));
    }
  }

  if (s.tool) {
    for (const auto& a : s.tool->anomalies) {
      Finding f = base("anomaly", -1);
      f.severity = Severity::kWarning;
      f.message = fmt::format("{} of {:#x} ({})", a.kind, a.addr, a.api);
      f.stacks.push_back(note_for(sites, a.stack, false, "", o.frames));
      r.findings.push_back(std::move(f));
    }
  }
}

}  // namespace

std::string check_options_problem(const CheckOptions& o, const std::vector<std::string>& inputs) {
  if (!o.max_growth && !o.mark.empty()) return "--mark is only used with --max-growth";
  if (!o.suppressions.empty()) {
    try {
      load_suppressions(o.suppressions);
    } catch (const SuppressionError& e) {
      return e.what();
    }
  }
  if (!o.junit.empty()) {
    if (o.junit == "-") return "--junit needs a file name, not -";
    return io::output_problem(o.junit, {o.force, inputs});
  }
  return {};
}

CheckResult evaluate_check(const std::vector<LoadedSnapshot>& snaps, const CheckOptions& o) {
  CheckResult r;
  std::vector<Suppression> rules;
  if (!o.suppressions.empty()) rules = load_suppressions(o.suppressions);
  for (const auto& ls : snaps) {
    r.snapshots.push_back(ls.path);
    check_one(ls, o, rules, r);
  }
  for (const auto& rule : rules) {
    if (rule.hits)
      r.suppressions_used.push_back({rule.source, rule.pattern, rule.hits, rule.bytes});
  }
  return r;
}

void write_check_text(const CheckResult& r, std::ostream& out) {
  for (const auto& f : r.findings) {
    if (f.severity == Severity::kPass) continue;
    out << fmt::format("{}: {}: {}\n", f.snapshot,
                       f.severity == Severity::kError ? "error" : "warning", f.message);
    for (const auto& s : f.stacks) {
      if (!s.title.empty()) out << "  " << s.title << ":\n";
      for (const auto& l : s.lines) out << "    " << l << '\n';
    }
    if (f.stacks_omitted) out << fmt::format("  ... {} more\n", f.stacks_omitted);
  }
  for (const auto& snap : r.snapshots) {
    int passed = 0, failed = 0;
    for (const auto& f : r.findings) {
      if (f.snapshot != snap) continue;
      passed += f.severity == Severity::kPass;
      failed += f.severity == Severity::kError;
    }
    if (!failed) out << fmt::format("{}: ok: {} passed\n", snap, plural(passed, "check"));
  }
  if (!r.suppressions_used.empty()) {
    out << "Suppressions used:\n";
    for (const auto& u : r.suppressions_used) {
      out << fmt::format("  {:>6} {:>12}  {} ({})\n", u.hits, format_bytes(u.bytes), u.pattern,
                         u.source);
    }
  }
  out << fmt::format("cumemtrace check: {} failed, {} passed\n", r.failures(), r.passes());
}

void write_check_json(const CheckResult& r, std::ostream& out) {
  using nlohmann::json;
  json files = json::array();
  for (const auto& snap : r.snapshots) {
    json checks = json::array();
    bool ok = true;
    for (const auto& f : r.findings) {
      if (f.snapshot != snap) continue;
      ok = ok && f.severity != Severity::kError;
      json stacks = json::array();
      for (const auto& s : f.stacks) {
        stacks.push_back(
            {{"title", s.title}, {"frames", s.lines}, {"file", s.file}, {"line", s.line}});
      }
      checks.push_back({{"check", f.check},
                        {"device", f.device < 0 ? json(nullptr) : json(f.device)},
                        {"status", f.severity == Severity::kPass    ? "pass"
                                   : f.severity == Severity::kError ? "fail"
                                                                    : "warning"},
                        {"value", f.value},
                        {"limit", f.limit},
                        {"message", f.message},
                        {"stacks", std::move(stacks)},
                        {"stacks_omitted", f.stacks_omitted}});
    }
    files.push_back({{"file", snap}, {"ok", ok}, {"checks", std::move(checks)}});
  }
  json used = json::array();
  for (const auto& u : r.suppressions_used) {
    used.push_back(
        {{"source", u.source}, {"pattern", u.pattern}, {"hits", u.hits}, {"bytes", u.bytes}});
  }
  json j = {{"ok", r.failures() == 0},
            {"failed", r.failures()},
            {"passed", r.passes()},
            {"files", std::move(files)},
            {"suppressions_used", std::move(used)}};
  out << j.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
}

int run_check(const std::vector<LoadedSnapshot>& snaps, const CheckOptions& o, std::ostream& out,
              std::ostream& err) {
  std::vector<std::string> inputs;
  for (const auto& ls : snaps) inputs.push_back(ls.path);
  if (auto problem = check_options_problem(o, inputs); !problem.empty()) {
    err << "cumemtrace check: " << problem << '\n';
    return 2;
  }
  CheckResult r;
  try {
    r = evaluate_check(snaps, o);
  } catch (const SuppressionError& e) {
    err << "cumemtrace check: " << e.what() << '\n';
    return 2;
  } catch (const RangeNotFound& e) {
    err << "cumemtrace check: " << e.what() << '\n';
    return 2;
  }
  if (!o.junit.empty()) {
    try {
      io::write_output_file(o.junit, {o.force, inputs},
                            [&](std::ostream& j) { write_junit(r, j); });
    } catch (const io::OutputFileError& e) {
      err << "cumemtrace check: " << e.what() << '\n';
      return 2;
    }
  }
  if (o.format == "json") {
    write_check_json(r, out);
  } else if (o.format == "github") {
    write_github(r, out);
  } else {
    write_check_text(r, out);
  }
  return r.failures() ? 1 : 0;
}

}  // namespace cumemtrace::analysis
