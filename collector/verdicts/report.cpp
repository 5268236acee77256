#include "verdicts/report.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/breakdown_format.h"
#include "snapshot/size_format.h"

namespace cumemtrace::analysis {

using snap::format_bytes;

namespace {

nlohmann::json frames_json(const SiteTable& sites, int32_t stack, size_t max) {
  nlohmann::json a = nlohmann::json::array();
  for (const snap::Frame* f : sites.program_frames(stack, max)) {
    a.push_back({{"name", f->name}, {"filename", f->filename}, {"line", f->line}});
  }
  return a;
}

nlohmann::json sites_json(const std::vector<SiteStat>& v, const SiteTable& sites, size_t top,
                          size_t frames) {
  nlohmann::json a = nlohmann::json::array();
  for (size_t i = 0; i < v.size() && i < top; ++i) {
    a.push_back({{"site", v[i].site},
                 {"count", v[i].count},
                 {"bytes", v[i].bytes},
                 {"frames", frames_json(sites, v[i].stack, frames)}});
  }
  return a;
}

void print_sites(std::ostream& out, const std::vector<SiteStat>& v, size_t top) {
  for (size_t i = 0; i < v.size() && i < top; ++i) {
    out << fmt::format("    {:>12} {:>9}  {}\n", format_bytes(v[i].bytes), v[i].count, v[i].site);
  }
  if (v.size() > top) out << fmt::format("    ... {} more\n", plural(v.size() - top, "site"));
}

std::string range_label(const SizeBucket& b) {
  if (b.high == 1) return "0 B";
  if (b.high == 0) return fmt::format(">= {}", format_bytes(b.low));
  return fmt::format("{} .. <{}", format_bytes(b.low), format_bytes(b.high));
}

std::string hex(uint64_t v) {
  return fmt::format("{:#x}", v);
}

// "at exit" for a snapshot written when the program ended; "at this snapshot" for one written
// while it ran (at an OOM, on request, periodically): what it holds is live then, not at exit.
std::string end_moment(const snap::Snapshot& s) {
  return s.tool && s.tool->reason != "exit" ? "at this snapshot" : "at exit";
}

std::string layers_moment(const Breakdown& b, size_t oom_number, int64_t origin,
                          const std::string& end);

void print_layers(std::ostream& out, const DeviceReport& d, int64_t origin,
                  const std::string& end) {
  size_t ooms = 0;
  // Exit first: it is exact (from the blocks); then the peak and the OOMs.
  std::vector<const Breakdown*> order;
  for (const auto& b : d.layers)
    if (b.moment == "exit") order.push_back(&b);
  for (const auto& b : d.layers)
    if (b.moment != "exit") order.push_back(&b);
  for (const Breakdown* b : order) {
    const std::string pt = pytorch_layers_text(*b);
    const std::string drv = driver_layers_text(*b);
    if (b->moment == "oom") ++ooms;
    if (pt.empty() && drv.empty()) continue;
    out << fmt::format("  memory layers {}:\n", layers_moment(*b, ooms, origin, end));
    if (!pt.empty()) {
      out << fmt::format("    device {}: {}", d.timeline.device, pt);
      if (b->pytorch_reserved)
        out << fmt::format(" ({:.1f}% of reserved free)", 100.0 * b->free_share);
      out << '\n';
    }
    if (!drv.empty()) out << fmt::format("    device {}: {}\n", d.timeline.device, drv);
  }
}

std::string layers_moment(const Breakdown& b, size_t oom_number, int64_t origin,
                          const std::string& end) {
  if (b.moment == "exit") return fmt::format("{} ({})", end, format_time(b.time_us, origin));
  if (b.moment == "peak")
    return fmt::format("at {} ({})", layers_peak_name(b), format_time(b.time_us, origin));
  return fmt::format("at OOM {} ({}, {} requested)", oom_number, format_time(b.time_us, origin),
                     snap::format_bytes(b.oom_requested));
}

// The report's first section: each OOM's verdict, its facts, who holds the memory, the advice
// the facts support and the failing request's own stack (oom_verdict.h; the HTML's OOM card shows
// the same lines).
void print_ooms(std::ostream& out, const Report& r, const SiteTable& sites,
                const ReportOptions& o) {
  for (size_t k = 0; k < r.ooms.size(); ++k) {
    const OomVerdict& v = r.ooms[k];
    out << fmt::format("\nOOM {} on device {} at {}: {}\n", k + 1, v.device,
                       format_time(v.time_us, r.time_origin_us), v.verdict);
    out << fmt::format("  {}\n", oom_verdict_line(v));
    for (const auto& f : oom_facts(v)) out << fmt::format("  {}\n", f);
    // Who holds it: PyTorch's tensors at the OOM, by category and by the user's line (ledger.h).
    if (!v.held.by_site.empty()) {
      if (v.categorized) {
        out << fmt::format("  held by category{}: {}\n", oom_held_when(v),
                           categories_text(v.held.by_category, false));
      }
      out << fmt::format("  held by line{}:\n", v.categorized ? "" : oom_held_when(v));
      print_site_bytes(out, v.held.by_site, o.top, false, v.categorized);
    }
    for (const auto& a : v.advice) out << fmt::format("  advice: {}\n", a);
    out << "  the failing request:\n";
    for (const auto& line : stack_lines(sites, v.stack, false, o.frames))
      out << "        " << line << '\n';
  }
}

nlohmann::json ooms_json(const Report& r, const SiteTable& sites, const ReportOptions& o) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& v : r.ooms) {
    a.push_back(oom_verdict_json(v, sites, o.top));
    a.back()["frames"] = frames_json(sites, v.stack, o.frames);
  }
  return a;
}

void print_range(std::ostream& out, const RangeWindow& w, const RangeResult& rr,
                 const SiteTable& sites, int64_t origin, const ReportOptions& o) {
  out << fmt::format("  range '{}' ({} .. {}{}):\n", w.name, format_time(w.start_us, origin),
                     format_time(w.end_us, origin),
                     w.completed > 1 ? fmt::format(", the last of {}", w.completed) : "");
  out << fmt::format("    peak {} at {}; {} at START, {} at END\n", format_bytes(rr.peak.bytes),
                     format_time(rr.peak.time_us, origin), format_bytes(rr.start_bytes),
                     format_bytes(rr.end_bytes));
  out << fmt::format("    its own peak (allocated within, live at once) {} at {}\n",
                     format_bytes(rr.own.bytes), format_time(rr.own.time_us, origin));
  out << fmt::format("    allocated within and live at END: {} in {}\n",
                     format_bytes(rr.leaked_bytes), plural(rr.leaked.size(), "allocation"));
  print_sites(out, by_site(rr.leaked, sites), o.top);
}

nlohmann::json layers_json(const std::vector<Breakdown>& layers) {
  using nlohmann::json;
  json a = json::array();
  for (const auto& b : layers) {
    json j = {{"moment", b.moment}, {"time_us", b.time_us}, {"tracked_bytes", b.tracked}};
    if (b.moment == "oom") j["oom_requested_bytes"] = b.oom_requested;
    if (b.has_pytorch) {
      j["pytorch"] = {{"reserved_bytes", b.pytorch_reserved},
                      {"allocated_bytes", b.pytorch_allocated},
                      {"cached_free_bytes", b.cached_free},
                      {"largest_free_block_bytes",
                       b.largest_free_block ? json(*b.largest_free_block) : json(nullptr)},
                      {"free_share", b.free_share}};
    }
    json libs = json::object();
    for (const auto& [lib, bytes] : b.by_library) libs[lib] = bytes;
    j["other_libraries"] = {{"bytes", b.other_libraries}, {"by_library", std::move(libs)}};
    j["driver_visible_bytes"] = b.driver_visible ? json(*b.driver_visible) : json(nullptr);
    j["untracked_bytes"] = b.driver_visible ? json(b.untracked) : json(nullptr);
    // The split of untracked: null where the context was not measured (or no NVML sample).
    j["context_bytes"] = b.context ? json(*b.context) : json(nullptr);
    j["other_untracked_bytes"] = b.context ? json(b.other_untracked) : json(nullptr);
    a.push_back(std::move(j));
  }
  return a;
}

}  // namespace

Report build_report(const AnalysedSnapshot& view, const SiteTable& sites, const std::string& file,
                    const std::string& range, int module_depth) {
  const snap::Snapshot& s = view.snapshot();
  Report r;
  r.file = file;
  if (!range.empty()) {
    std::string why;
    r.range = find_range(s, range, &why);
    if (!r.range) throw RangeNotFound(why);
  }
  r.flavor = flavor_of(s);
  for (const auto& tr : s.device_traces) r.trace_entries += tr.size();
  r.time_origin_us = time_origin(s);
  const auto live = live_at_exit(s);
  const int n = device_count(s);
  for (int d = 0; d < n; ++d) {
    const DeviceReplay& replay = view.replay(d);
    const Timeline& tl = replay.timeline();
    std::vector<Allocation> live_d;
    for (const auto& a : live) {
      if (a.device == d) live_d.push_back(a);
    }
    if (!device_used(tl, !live_d.empty())) continue;
    DeviceReport dr;
    dr.timeline = tl;
    const Attributed at_peak = replay.attributed_after(tl.trace.index);
    dr.at_peak = by_site(at_peak.allocations, sites);
    if (at_peak.has_cache) dr.at_peak_cached = at_peak.cached_free;
    dr.live_at_exit = by_stack(live_d);
    dr.live_at_exit_kinds = count_live(live_d);
    dr.live_at_exit_bytes = dr.live_at_exit_kinds.bytes;
    dr.live_at_exit_count = dr.live_at_exit_kinds.count;
    dr.layers = replay.breakdowns(sites);
    if (replay.splits_tensors())
      for (const auto& b : dr.layers)
        if (b.moment == "exit") dr.at_exit_cached = b.cached_free;
    dr.contexts = replay.contexts();
    if (r.range) dr.range = evaluate_range(replay, *r.range);
    r.devices.push_back(std::move(dr));
  }
  r.top_by_bytes = trace_alloc_sites(s, sites, false);
  r.top_by_count = trace_alloc_sites(s, sites, true);
  r.histogram = size_histogram(s);
  r.ledger = build_ledger(view, sites, module_depth);
  r.modules = build_module_view(view, module_depth);
  r.ooms = oom_verdicts(view, sites);
  return r;
}

namespace {

// What ran, how it ended, and whether every event was recorded.
void print_program_text(std::ostream& out, const snap::ToolSection& t) {
  std::string cmd;
  for (const auto& a : t.argv) cmd += (cmd.empty() ? "" : " ") + a;
  if (cmd.empty()) cmd = t.exe;
  std::string ended = t.ended.how;
  if (t.ended.how == "exit") ended = fmt::format("exit code {}", t.ended.code);
  if (t.ended.how == "signal") ended = fmt::format("signal {}", t.ended.signal);
  out << fmt::format("  program: {} (pid {}), ended: {}, snapshot written on {}\n", cmd, t.pid,
                     ended, t.reason);
  out << fmt::format("  events: {} recorded, {} dropped{}\n", t.events_total, t.events_dropped,
                     t.events_dropped ? " (INCOMPLETE: numbers below undercount)" : "");
  if (!t.ring_error.empty()) {
    out << fmt::format("  INCOMPLETE: {}; events after it are missing\n", t.ring_error);
  }
  if (t.time_resolution_ns) {
    out << fmt::format("  times: read at the kernel tick (--clock coarse), every {:g} ms\n",
                       static_cast<double>(t.time_resolution_ns) / 1e6);
  }
}

// A device's peaks, one line per layer it has.
void print_peaks_text(std::ostream& out, const Report& r, const Timeline& tl,
                      const std::string& end) {
  const char* what = r.flavor == Flavor::kTorch ? "allocated" : "device memory";
  // Each watermark by its source (watermark.h): the collector's summary of all events where it
  // knew more than the trace holds, and then the trace's own highest point beside it.
  const Watermark& peak = tl.highest_known();
  out << fmt::format("  peak {}: {} at {}{}\n", what, format_bytes(peak.bytes),
                     format_time(peak.time_us, r.time_origin_us),
                     tl.summary_higher() ? " (the collector's summary of all events)" : "");
  if (tl.summary_higher()) {
    out << fmt::format(
        "  the trace's highest point: {} at {} (the trace holds less; \"live at the peak\" "
        "shows this moment)\n",
        format_bytes(tl.trace.bytes), format_time(tl.trace.time_us, r.time_origin_us));
  }
  if (tl.has_reserved) {
    out << fmt::format("  peak reserved (cached by the allocator included): {} at {}\n",
                       format_bytes(tl.reserved.bytes),
                       format_time(tl.reserved.time_us, r.time_origin_us));
    out << fmt::format("  reserved {}: {}\n", end, format_bytes(tl.reserved_end_bytes));
    if (r.flavor == Flavor::kCumemtrace) {
      out << fmt::format("  peak allocated ({}): {} at {}\n",
                         tl.pool_layer ? "stream-ordered pool allocations" : "PyTorch tensors",
                         format_bytes(tl.allocated.bytes),
                         format_time(tl.allocated.time_us, r.time_origin_us));
    }
  }
  if (tl.has_driver) {
    out << fmt::format("  peak driver-visible (NVML): {} at {}\n", format_bytes(tl.driver.bytes),
                       format_time(tl.driver.time_us, r.time_origin_us));
  }
}

// What a device still held at the end, by call stack.
void print_live_at_exit_text(std::ostream& out, const DeviceReport& d, const SiteTable& sites,
                             const ReportOptions& o, const std::string& end) {
  if (!d.live_at_exit.empty()) {
    out << fmt::format("  live {}, by call stack:\n", end);
    for (size_t i = 0; i < d.live_at_exit.size() && i < o.top; ++i) {
      const auto& g = d.live_at_exit[i];
      out << fmt::format("    {} in {}\n", format_bytes(g.bytes), plural(g.count, "allocation"));
      for (const auto& line : stack_lines(sites, g.stack, g.before_trace, o.frames))
        out << "        " << line << '\n';
    }
    if (d.live_at_exit.size() > o.top)
      out << fmt::format("    ... {} more\n", plural(d.live_at_exit.size() - o.top, "stack"));
  }
  if (d.at_exit_cached)
    out << fmt::format("  {}, {}: {}\n", end, kCachedFreeLabel, format_bytes(*d.at_exit_cached));
}

void print_device_text(std::ostream& out, const Report& r, const DeviceReport& d,
                       const SiteTable& sites, const ReportOptions& o, const std::string& end) {
  const Timeline& tl = d.timeline;
  out << fmt::format("\nDevice {}\n", tl.device);
  print_peaks_text(out, r, tl, end);
  for (const auto& c : d.contexts) {
    out << fmt::format(
        "  CUDA context (measured at creation): {} from {} at {}{}\n", format_bytes(c.bytes), c.api,
        format_time(c.time_us, r.time_origin_us),
        c.end_time_us ? ", destroyed at " + format_time(c.end_time_us, r.time_origin_us) : "");
  }
  if (tl.start_bytes) {
    out << fmt::format("  live before the first trace entry: {}\n", format_bytes(tl.start_bytes));
  }
  out << fmt::format("  allocations: {}, frees: {}\n", tl.allocations, tl.frees);
  // With PyTorch's blocks in a cumemtrace file the allocations above are segments (PyTorch's
  // and other libraries' memory); the program's tensors are its requests.
  if (tensors_apart(tl, r.flavor)) {
    out << fmt::format("  tensor allocations (PyTorch's requests): {}\n", tl.requests);
  }
  out << fmt::format("  live {}: {} in {}\n", end, format_bytes(d.live_at_exit_bytes),
                     live_count_text(d.live_at_exit_kinds));
  print_layers(out, d, r.time_origin_us, end);
  if (d.range) print_range(out, *r.range, *d.range, sites, r.time_origin_us, o);
  out << "  live at the peak, by allocation site:\n";
  out << fmt::format("    {:>12} {:>9}  {}\n", "bytes", "count", "site");
  print_sites(out, d.at_peak, o.top);
  if (d.at_peak_cached)
    out << fmt::format("    {:>12} {:>9}  {}\n", format_bytes(*d.at_peak_cached), "",
                       kCachedFreeLabel);
  print_live_at_exit_text(out, d, sites, o, end);
}

// The whole file's sites and sizes, every device together.
void print_totals_text(std::ostream& out, const Report& r, const ReportOptions& o) {
  out << "\nTop allocation sites by bytes (all alloc events):\n";
  out << fmt::format("    {:>12} {:>9}  {}\n", "bytes", "count", "site");
  print_sites(out, r.top_by_bytes, o.top);
  out << "\nTop allocation sites by count:\n";
  out << fmt::format("    {:>12} {:>9}  {}\n", "bytes", "count", "site");
  print_sites(out, r.top_by_count, o.top);

  out << "\nAllocation sizes:\n";
  out << fmt::format("    {:<24} {:>9} {:>12}\n", "size", "count", "bytes");
  for (const auto& b : r.histogram) {
    out << fmt::format("    {:<24} {:>9} {:>12}\n", range_label(b), b.count, format_bytes(b.bytes));
  }
}

// What only cumemtrace records: anomalies, VMM handles and pinned host memory still held.
void print_tool_tail_text(std::ostream& out, const Report& r, const snap::ToolSection& t,
                          const SiteTable& sites, const ReportOptions& o, const std::string& end) {
  out << fmt::format("\nAnomalies: {}\n",
                     t.anomalies.empty() ? "none" : std::to_string(t.anomalies.size()));
  for (size_t i = 0; i < t.anomalies.size() && i < o.top * 10; ++i) {
    const auto& a = t.anomalies[i];
    out << fmt::format("    {} of {} ({}) at {}{}\n", a.kind, hex(a.addr), a.api,
                       format_time(a.time_us, r.time_origin_us),
                       a.tid ? fmt::format(", thread {}", a.tid) : "");
    for (const auto& line : stack_lines(sites, a.stack, false, o.frames))
      out << "        " << line << '\n';
  }
  if (!t.vmm_handles.empty()) {
    uint64_t bytes = 0;
    for (const auto& h : t.vmm_handles) bytes += h.size;
    out << fmt::format("\nVMM physical memory held {}: {} in {}\n", end, format_bytes(bytes),
                       plural(t.vmm_handles.size(), "handle"));
  }
  if (!t.host_allocations.empty()) {
    uint64_t bytes = 0;
    for (const auto& h : t.host_allocations) bytes += h.size;
    out << fmt::format("\nPinned host memory held {}: {} in {}\n", end, format_bytes(bytes),
                       plural(t.host_allocations.size(), "allocation"));
  }
}

}  // namespace

void print_report_text(const Report& r, const snap::Snapshot& s, const SiteTable& sites,
                       const ReportOptions& o, std::ostream& out) {
  out << fmt::format("cumemtrace report: {} ({})\n", r.file, flavor_name(r.flavor));
  if (s.tool) print_program_text(out, *s.tool);
  out << fmt::format("  trace entries: {}\n", r.trace_entries);
  print_ooms(out, r, sites, o);
  if (r.ledger)
    print_ledger_text(*r.ledger, r.time_origin_us, o.top, out,
                      o.small_lines ? 0 : kMinLedgerLineBytes);
  if (r.modules) print_module_view_text(*r.modules, o.top, out);
  const std::string end = end_moment(s);
  for (const auto& d : r.devices) print_device_text(out, r, d, sites, o, end);
  print_totals_text(out, r, o);
  if (s.tool) print_tool_tail_text(out, r, *s.tool, sites, o, end);
}

void print_report_json(const Report& r, const snap::Snapshot& s, const SiteTable& sites,
                       const ReportOptions& o, std::ostream& out) {
  out << report_json(r, s, sites, o).dump(2, ' ', false, nlohmann::json::error_handler_t::replace)
      << '\n';
}

nlohmann::json report_json(const Report& r, const snap::Snapshot& s, const SiteTable& sites,
                           const ReportOptions& o) {
  using nlohmann::json;
  json j;
  j["file"] = r.file;
  j["kind"] = r.flavor == Flavor::kTorch ? "pytorch" : "cumemtrace";
  j["trace_entries"] = r.trace_entries;
  j["time_origin_us"] = r.time_origin_us;
  if (s.tool) {
    const auto& t = *s.tool;
    j["program"] = {
        {"exe", t.exe},
        {"argv", t.argv},
        {"pid", t.pid},
        {"ended", {{"how", t.ended.how}, {"code", t.ended.code}, {"signal", t.ended.signal}}}};
    j["events_total"] = t.events_total;
    j["events_dropped"] = t.events_dropped;
    j["time_resolution_ns"] = t.time_resolution_ns;  // 0: precise; else --clock coarse's tick
  }
  j["complete"] = !s.tool || (s.tool->events_dropped == 0 && s.tool->ring_error.empty());
  j["pytorch_ledger"] = r.ledger
                            ? ledger_json(*r.ledger, o.top, o.small_lines ? 0 : kMinLedgerLineBytes)
                            : json(nullptr);
  j["modules"] = r.modules ? module_view_json(*r.modules, o.top) : json(nullptr);
  json devs = json::array();
  for (const auto& d : r.devices) {
    const Timeline& tl = d.timeline;
    json jd = {{"device", tl.device},
               {"peak_bytes", tl.highest_known().bytes},
               {"peak_time_us", tl.highest_known().time_us},
               {"start_bytes", tl.start_bytes},
               {"end_bytes", tl.end_bytes},
               {"allocations", tl.allocations},
               {"frees", tl.frees},
               {"requests", tl.requests},
               {"live_at_exit_bytes", d.live_at_exit_bytes},
               {"live_at_exit_count", d.live_at_exit_count},
               {"live_at_exit_tensors", d.live_at_exit_kinds.pytorch},
               {"live_at_exit_tensor_bytes", d.live_at_exit_kinds.pytorch_bytes},
               {"at_peak", sites_json(d.at_peak, sites, o.top, o.frames)}};
    // PyTorch's cache beside the tensors (null where PyTorch's segments are not split).
    jd["at_peak_cached_free_bytes"] = d.at_peak_cached ? json(*d.at_peak_cached) : json(nullptr);
    jd["at_exit_cached_free_bytes"] = d.at_exit_cached ? json(*d.at_exit_cached) : json(nullptr);
    if (tl.has_reserved) {
      jd["reserved_peak_bytes"] = tl.reserved.bytes;
      jd["reserved_peak_time_us"] = tl.reserved.time_us;
      jd["reserved_end_bytes"] = tl.reserved_end_bytes;
    }
    json stacks = json::array();
    for (size_t i = 0; i < d.live_at_exit.size() && i < o.top; ++i) {
      const auto& g = d.live_at_exit[i];
      stacks.push_back(
          {{"count", g.count},
           {"bytes", g.bytes},
           {"site", g.before_trace ? std::string(kBeforeTraceSite) : sites.site(g.stack)},
           {"frames", frames_json(sites, g.stack, o.frames)}});
    }
    jd["live_at_exit"] = std::move(stacks);
    jd["layers"] = layers_json(d.layers);
    json contexts = json::array();
    for (const auto& c : d.contexts) {
      contexts.push_back({{"bytes", c.bytes},
                          {"time_us", c.time_us},
                          {"end_time_us", c.end_time_us ? json(c.end_time_us) : json(nullptr)},
                          {"api", c.api},
                          {"handle", c.handle}});
    }
    jd["contexts"] = std::move(contexts);
    if (tl.has_reserved) jd["allocated_peak_bytes"] = tl.allocated.bytes;
    if (tl.has_driver) {
      jd["driver_peak_bytes"] = tl.driver.bytes;
      jd["driver_peak_time_us"] = tl.driver.time_us;
    }
    if (d.range) {
      jd["range"] = {
          {"name", r.range->name},
          {"start_time_us", r.range->start_us},
          {"end_time_us", r.range->end_us},
          {"peak_bytes", d.range->peak.bytes},
          {"peak_time_us", d.range->peak.time_us},
          {"own_peak_bytes", d.range->own.bytes},
          {"own_peak_time_us", d.range->own.time_us},
          {"start_bytes", d.range->start_bytes},
          {"end_bytes", d.range->end_bytes},
          {"leaked_bytes", d.range->leaked_bytes},
          {"leaked_count", d.range->leaked.size()},
          {"leaked", sites_json(by_site(d.range->leaked, sites), sites, o.top, o.frames)}};
    }
    devs.push_back(std::move(jd));
  }
  j["devices"] = std::move(devs);
  j["top_sites_by_bytes"] = sites_json(r.top_by_bytes, sites, o.top, o.frames);
  j["top_sites_by_count"] = sites_json(r.top_by_count, sites, o.top, o.frames);
  json hist = json::array();
  for (const auto& b : r.histogram) {
    hist.push_back({{"min_bytes", b.low},
                    {"max_bytes", b.high ? json(b.high - 1) : json(nullptr)},
                    {"count", b.count},
                    {"bytes", b.bytes}});
  }
  j["size_histogram"] = std::move(hist);
  json anomalies = json::array();
  if (s.tool) {
    for (const auto& a : s.tool->anomalies) {
      anomalies.push_back({{"kind", a.kind},
                           {"addr", a.addr},
                           {"api", a.api},
                           {"time_us", a.time_us},
                           {"tid", a.tid},
                           {"site", sites.site(a.stack)},
                           {"frames", frames_json(sites, a.stack, o.frames)}});
    }
    uint64_t vmm = 0, host = 0;
    for (const auto& h : s.tool->vmm_handles) vmm += h.size;
    for (const auto& h : s.tool->host_allocations) host += h.size;
    j["vmm_handles"] = {{"count", s.tool->vmm_handles.size()}, {"bytes", vmm}};
    j["host_allocations"] = {{"count", s.tool->host_allocations.size()}, {"bytes", host}};
  }
  j["anomalies"] = std::move(anomalies);
  j["ooms"] = ooms_json(r, sites, o);
  return j;
}

}  // namespace cumemtrace::analysis
