#include "verdicts/process_summary.h"

#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/range.h"
#include "analysis/rank_identity.h"
#include "io/file_output.h"

namespace cumemtrace::analysis {

using nlohmann::json;

namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The most the device's measured contexts held at once (a context counts from its creation to
// its destruction): the rank table's "CUDA context" column.
std::optional<uint64_t> context_bytes(const std::vector<snap::ContextMemory>& contexts) {
  if (contexts.empty()) return std::nullopt;
  uint64_t most = 0;
  for (const auto& c : contexts) {
    uint64_t at = 0;
    for (const auto& o : contexts)
      if (o.live_at(c.time_us)) at += o.bytes;
    most = std::max(most, at);
  }
  return most;
}

json opt(const std::optional<uint64_t>& v) {
  return v ? json(*v) : json(nullptr);
}

std::optional<uint64_t> opt_u64(const json& j, const char* key) {
  const auto& v = j.at(key);
  if (v.is_null()) return std::nullopt;
  return v.get<uint64_t>();
}

json layer_json(const std::optional<LayerPeakMeasure>& m) {
  if (!m) return nullptr;
  return {{"bytes", m->bytes}, {"time_us", m->time_us}};
}

std::optional<LayerPeakMeasure> layer_from(const json& j) {
  if (j.is_null()) return std::nullopt;
  return LayerPeakMeasure{j.at("bytes").get<uint64_t>(), j.at("time_us").get<int64_t>()};
}

json growth_json(const Growth& g) {
  json site = nullptr;
  if (!g.by_site.empty()) {
    const SiteBytes& s = g.by_site.front();
    site = {{"site", s.site},
            {"category", std::string(snap::category_name(s.category))},
            {"bytes", s.bytes}};
  }
  return {{"judged", g.judged},
          {"why", g.why},
          {"warmup", g.warmup},
          {"first_counted", g.first_counted},
          {"last_counted", g.last_counted},
          {"end_step", g.end_step},
          {"steps_counted", g.steps_counted},
          {"bytes", g.bytes},
          {"per_step", g.per_step},
          {"largest", std::move(site)}};
}

Growth growth_from(const json& j) {
  Growth g;
  g.judged = j.at("judged").get<bool>();
  g.why = j.at("why").get<std::string>();
  g.warmup = j.at("warmup").get<int>();
  g.first_counted = j.at("first_counted").get<int>();
  g.last_counted = j.at("last_counted").get<int>();
  g.end_step = j.at("end_step").get<int>();
  g.steps_counted = j.at("steps_counted").get<int>();
  g.bytes = j.at("bytes").get<uint64_t>();
  g.per_step = j.at("per_step").get<uint64_t>();
  if (const auto& s = j.at("largest"); !s.is_null()) {
    SiteBytes b;
    b.site = s.at("site").get<std::string>();
    b.category = snap::parse_category(s.at("category").get<std::string>())
                     .value_or(snap::Category::kUnknown);
    b.bytes = s.at("bytes").get<int64_t>();
    g.by_site.push_back(std::move(b));
  }
  return g;
}

// What check's limits measure on `device` at the end: the same functions check_snapshot.cpp uses
// (range.h layer_peak; the ledger's leak rule, else every allocation live at exit).
DeviceLimits measure_limits(const AnalysedSnapshot& a, int device,
                            const std::optional<Ledger>& ledger) {
  const snap::Snapshot& s = a.snapshot();
  DeviceLimits m;
  const DeviceReplay& rp = a.replay(device);
  const Timeline& tl = rp.timeline();
  auto layer = [&](bool driver, bool allocated) {
    const Watermark p = layer_peak(rp, s, device, driver, allocated);
    return LayerPeakMeasure{p.bytes, p.time_us};
  };
  if (tl.has_reserved) m.allocated = layer(false, true), m.reserved = layer(false, false);
  if (tl.has_driver && s.tool) m.driver = layer(true, false);
  const DeviceLedger* dl = nullptr;
  if (ledger)
    for (const auto& x : ledger->devices)
      if (x.device == device) dl = &x;
  const std::vector<Allocation> live = dl ? std::vector<Allocation>{} : live_at_exit(s);
  for (const auto& a : dl ? dl->leaked : live) {
    if (a.device != device) continue;
    m.leaked_bytes += a.size;
    ++m.leaked_count;
  }
  if (dl) m.leaked_warmup = dl->warmup;
  return m;
}

}  // namespace

RankIdentity summary_identity(const ProcessSummary& p) {
  return p.tool ? rank_identity(*p.tool) : RankIdentity{};
}

std::string process_name(const ProcessSummary& p) {
  const RankIdentity id = summary_identity(p);
  if (id.known()) return id.describe();
  if (!p.tool) return "(no process recorded)";
  std::string exe = base_name(p.tool->exe);
  return exe.empty() ? fmt::format("pid {}", p.tool->pid)
                     : fmt::format("pid {} ({})", p.tool->pid, exe);
}

ProcessSummary summarize_process(const AnalysedSnapshot& a, const Report& r, SummarizedFile file) {
  const snap::Snapshot& s = a.snapshot();
  ProcessSummary p;
  p.file = std::move(file);
  if (s.tool) {
    const snap::ToolSection& t = *s.tool;
    snap::ToolSection id;
    id.pid = t.pid;
    id.ppid = t.ppid;
    id.exe = t.exe;
    id.hostname = t.hostname;
    id.rank = t.rank;
    id.start_time_us = t.start_time_us;
    id.reason = t.reason;
    id.tag = t.tag;
    id.ended = t.ended;
    id.events_total = t.events_total;
    id.events_dropped = t.events_dropped;
    id.ring_error = t.ring_error;
    p.tool = std::move(id);
    p.anomalies = t.anomalies.size();
  }
  p.time_origin_us = time_origin(s);
  p.device_count = device_count(s);
  p.used_cuda = !snap::never_used_cuda(s);
  if (r.ledger) {
    p.steps = r.ledger->steps;
    p.complete_steps = r.ledger->complete_steps;
  }
  for (const DeviceReport& d : r.devices) {
    const Timeline& tl = d.timeline;
    DeviceSummary ds;
    ds.device = tl.device;
    ds.peak_bytes = tl.highest_known().bytes;
    ds.peak_time_us = tl.highest_known().time_us;
    if (tl.has_reserved) {
      ds.allocated_peak_bytes = tl.allocated.bytes;
      ds.reserved_peak_bytes = tl.reserved.bytes;
    }
    if (tl.has_driver) ds.driver_peak_bytes = tl.driver.bytes;
    ds.context_bytes = context_bytes(d.contexts);
    for (const auto& b : d.layers)
      if (b.moment == "peak" && b.has_pytorch) ds.other_libraries = b.other_libraries;
    if (r.ledger) {
      for (const auto& dl : r.ledger->devices) {
        if (dl.device != tl.device) continue;
        ds.has_ledger = true;
        for (const auto& c : dl.allocated_peak.by_category)
          ds.categories.emplace_back(std::string(snap::category_name(c.category)),
                                     c.bytes > 0 ? static_cast<uint64_t>(c.bytes) : 0);
        ds.growth = dl.growth;
        if (ds.growth->by_site.size() > 1) ds.growth->by_site.resize(1);
      }
    }
    ds.limits = measure_limits(a, tl.device, r.ledger);
    ds.live_at_exit_bytes = d.live_at_exit_bytes;
    ds.live_at_exit_count = d.live_at_exit_count;
    for (const auto& o : r.ooms) ds.ooms += o.device == tl.device;
    p.devices.push_back(std::move(ds));
  }
  // The first OOM: by time, then the list's order (job_oom.h's rule within one process).
  p.oom_count = r.ooms.size();
  std::optional<SiteTable> sites;
  for (size_t i = 0; i < r.ooms.size(); ++i) {
    const OomVerdict& v = r.ooms[i];
    if (p.first_oom && v.time_us >= p.first_oom->time_us) continue;
    FirstOom f;
    f.index = i;
    f.device = v.device;
    f.time_us = v.time_us;
    f.requested = v.requested;
    f.verdict = v.verdict;
    f.line = oom_verdict_line(v);
    if (!sites) sites.emplace(s);
    f.site = sites->site(v.stack);
    p.first_oom = std::move(f);
  }
  return p;
}

ProcessSummary summarize_snapshot(const AnalysedSnapshot& a, const std::string& path) {
  const SiteTable sites(a.snapshot());
  const Report r = build_report(a, sites, path);
  SummarizedFile file;
  if (!path.empty())
    if (auto f = summarized_file(path)) file = std::move(*f);
  return summarize_process(a, r, std::move(file));
}

std::optional<SummarizedFile> summarized_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  SummarizedFile f;
  f.name = base_name(path);
  f.bytes = static_cast<uint64_t>(st.st_size);
  f.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return f;
}

json summary_json(const ProcessSummary& p) {
  json process = nullptr;
  json identity = nullptr;
  if (p.tool) {
    const snap::ToolSection& t = *p.tool;
    process = {
        {"pid", t.pid},
        {"ppid", t.ppid},
        {"exe", t.exe},
        {"hostname", t.hostname},
        {"rank_env", t.rank},
        {"start_time_us", t.start_time_us},
        {"reason", t.reason},
        {"tag", t.tag},
        {"ended", {{"how", t.ended.how}, {"code", t.ended.code}, {"signal", t.ended.signal}}},
        {"events_total", t.events_total},
        {"events_dropped", t.events_dropped},
        {"ring_error", t.ring_error}};
    const RankIdentity id = rank_identity(t);
    if (id.known())
      identity = {{"rank", id.rank},
                  {"local_rank", id.local_rank >= 0 ? json(id.local_rank) : json(nullptr)},
                  {"world_size", id.world_size > 0 ? json(id.world_size) : json(nullptr)},
                  {"node", id.node >= 0 ? json(id.node) : json(nullptr)},
                  {"job", id.job.empty() ? json(nullptr) : json(id.job)},
                  {"launcher", id.launcher}};
  }
  json devices = json::array();
  for (const DeviceSummary& d : p.devices) {
    json categories = nullptr;
    if (d.has_ledger) {
      categories = json::array();
      for (const auto& [name, bytes] : d.categories)
        categories.push_back({{"category", name}, {"bytes", bytes}});
    }
    devices.push_back({{"device", d.device},
                       {"peak_bytes", d.peak_bytes},
                       {"peak_time_us", d.peak_time_us},
                       {"allocated_peak_bytes", opt(d.allocated_peak_bytes)},
                       {"reserved_peak_bytes", opt(d.reserved_peak_bytes)},
                       {"driver_peak_bytes", opt(d.driver_peak_bytes)},
                       {"context_bytes", opt(d.context_bytes)},
                       {"other_libraries_bytes", opt(d.other_libraries)},
                       {"categories_at_allocated_peak", std::move(categories)},
                       {"live_at_exit_bytes", d.live_at_exit_bytes},
                       {"live_at_exit_count", d.live_at_exit_count},
                       {"ooms", d.ooms},
                       {"growth_per_step", d.growth ? growth_json(*d.growth) : json(nullptr)},
                       {"check",
                        {{"allocated_peak", layer_json(d.limits.allocated)},
                         {"reserved_peak", layer_json(d.limits.reserved)},
                         {"driver_peak", layer_json(d.limits.driver)},
                         {"leaked_bytes", d.limits.leaked_bytes},
                         {"leaked_count", d.limits.leaked_count},
                         {"leaked_warmup", d.limits.leaked_warmup ? json(*d.limits.leaked_warmup)
                                                                  : json(nullptr)}}}});
  }
  json first = nullptr;
  if (p.first_oom) {
    const FirstOom& f = *p.first_oom;
    first = {{"index", f.index},     {"device", f.device},
             {"time_us", f.time_us}, {"requested_bytes", f.requested},
             {"verdict", f.verdict}, {"line", f.line},
             {"site", f.site}};
  }
  return {
      {"cumemtrace_summary", kSummaryVersion},
      {"snapshot", {{"file", p.file.name}, {"bytes", p.file.bytes}, {"mtime_ns", p.file.mtime_ns}}},
      {"process", std::move(process)},
      {"identity", std::move(identity)},
      {"time_origin_us", p.time_origin_us},
      {"device_count", p.device_count},
      {"anomalies", p.anomalies},
      {"used_cuda", p.used_cuda},
      {"steps", p.steps ? json(*p.steps) : json(nullptr)},
      {"complete_steps", p.complete_steps ? json(*p.complete_steps) : json(nullptr)},
      {"devices", std::move(devices)},
      {"ooms", {{"count", p.oom_count}, {"first", std::move(first)}}}};
}

ProcessSummary summary_from_json(const json& j) {
  if (!j.is_object() || !j.contains("cumemtrace_summary"))
    throw std::runtime_error("not a cumemtrace summary");
  if (j.at("cumemtrace_summary") != kSummaryVersion)
    throw std::runtime_error(fmt::format("a summary of version {}, not {}",
                                         j.at("cumemtrace_summary").dump(), kSummaryVersion));
  try {
    ProcessSummary p;
    const json& f = j.at("snapshot");
    p.file.name = f.at("file").get<std::string>();
    p.file.bytes = f.at("bytes").get<uint64_t>();
    p.file.mtime_ns = f.at("mtime_ns").get<int64_t>();
    if (const json& pr = j.at("process"); !pr.is_null()) {
      snap::ToolSection t;
      t.pid = pr.at("pid").get<int>();
      t.ppid = pr.at("ppid").get<int>();
      t.exe = pr.at("exe").get<std::string>();
      t.hostname = pr.at("hostname").get<std::string>();
      t.rank = pr.at("rank_env").get<std::map<std::string, std::string>>();
      t.start_time_us = pr.at("start_time_us").get<int64_t>();
      t.reason = pr.at("reason").get<std::string>();
      t.tag = pr.at("tag").get<std::string>();
      const json& e = pr.at("ended");
      t.ended.how = e.at("how").get<std::string>();
      t.ended.code = e.at("code").get<int>();
      t.ended.signal = e.at("signal").get<int>();
      t.events_total = pr.at("events_total").get<uint64_t>();
      t.events_dropped = pr.at("events_dropped").get<uint64_t>();
      t.ring_error = pr.at("ring_error").get<std::string>();
      p.tool = std::move(t);
    }
    p.time_origin_us = j.at("time_origin_us").get<int64_t>();
    p.device_count = j.at("device_count").get<int>();
    p.anomalies = j.at("anomalies").get<size_t>();
    p.used_cuda = j.at("used_cuda").get<bool>();
    if (!j.at("steps").is_null()) p.steps = j.at("steps").get<size_t>();
    if (!j.at("complete_steps").is_null()) p.complete_steps = j.at("complete_steps").get<size_t>();
    for (const json& d : j.at("devices")) {
      DeviceSummary ds;
      ds.device = d.at("device").get<int>();
      ds.peak_bytes = d.at("peak_bytes").get<uint64_t>();
      ds.peak_time_us = d.at("peak_time_us").get<int64_t>();
      ds.allocated_peak_bytes = opt_u64(d, "allocated_peak_bytes");
      ds.reserved_peak_bytes = opt_u64(d, "reserved_peak_bytes");
      ds.driver_peak_bytes = opt_u64(d, "driver_peak_bytes");
      ds.context_bytes = opt_u64(d, "context_bytes");
      ds.other_libraries = opt_u64(d, "other_libraries_bytes");
      if (const json& c = d.at("categories_at_allocated_peak"); !c.is_null()) {
        ds.has_ledger = true;
        for (const json& e : c)
          ds.categories.emplace_back(e.at("category").get<std::string>(),
                                     e.at("bytes").get<uint64_t>());
      }
      ds.live_at_exit_bytes = d.at("live_at_exit_bytes").get<uint64_t>();
      ds.live_at_exit_count = d.at("live_at_exit_count").get<uint64_t>();
      ds.ooms = d.at("ooms").get<size_t>();
      if (const json& g = d.at("growth_per_step"); !g.is_null()) ds.growth = growth_from(g);
      const json& c = d.at("check");
      ds.limits.allocated = layer_from(c.at("allocated_peak"));
      ds.limits.reserved = layer_from(c.at("reserved_peak"));
      ds.limits.driver = layer_from(c.at("driver_peak"));
      ds.limits.leaked_bytes = c.at("leaked_bytes").get<uint64_t>();
      ds.limits.leaked_count = c.at("leaked_count").get<uint64_t>();
      if (!c.at("leaked_warmup").is_null())
        ds.limits.leaked_warmup = c.at("leaked_warmup").get<int>();
      p.devices.push_back(std::move(ds));
    }
    const json& o = j.at("ooms");
    p.oom_count = o.at("count").get<size_t>();
    if (const json& f1 = o.at("first"); !f1.is_null()) {
      FirstOom fo;
      fo.index = f1.at("index").get<size_t>();
      fo.device = f1.at("device").get<int>();
      fo.time_us = f1.at("time_us").get<int64_t>();
      fo.requested = f1.at("requested_bytes").get<uint64_t>();
      fo.verdict = f1.at("verdict").get<std::string>();
      fo.line = f1.at("line").get<std::string>();
      fo.site = f1.at("site").get<std::string>();
      p.first_oom = std::move(fo);
    }
    return p;
  } catch (const json::exception& e) {
    throw std::runtime_error(fmt::format("a malformed summary: {}", e.what()));
  }
}

std::string summary_path_for(const std::string& snapshot_path) {
  if (!ends_with(snapshot_path, ".json")) return {};
  return snapshot_path.substr(0, snapshot_path.size() - 5) + ".summary";
}

void write_summary_file(const ProcessSummary& p, const std::string& snapshot_path) {
  const std::string path = summary_path_for(snapshot_path);
  if (path.empty())
    throw std::runtime_error(
        fmt::format("{}: no summary for a file not named *.json", snapshot_path));
  const std::string text = summary_json(p).dump(1) + "\n";
  io::write_output_file(path, {true, {snapshot_path}}, [&](std::ostream& out) { out << text; });
}

std::optional<ProcessSummary> read_current_summary(const std::string& snapshot_path) {
  const std::string path = summary_path_for(snapshot_path);
  if (path.empty()) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  const auto now = summarized_file(snapshot_path);
  if (!now) return std::nullopt;
  try {
    std::ostringstream text;
    text << in.rdbuf();
    ProcessSummary p = summary_from_json(json::parse(text.str()));
    if (!(p.file == *now)) return std::nullopt;  // stale: the snapshot changed since
    return p;
  } catch (const std::exception&) {
    return std::nullopt;  // not one this version reads: the snapshot is read instead
  }
}

}  // namespace cumemtrace::analysis
