#include "viz/html_report.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <set>
#include <sstream>

#include "analysis/breakdown_format.h"
#include "analysis/frames.h"
#include "pytorch/ledger.h"
#include "pytorch/oom_verdict.h"
#include "pytorch/whatif.h"
#include "snapshot/utf8.h"
#include "viz/report_assets.h"

namespace cumemtrace::viz {

namespace {

// Lines of "held by" in the OOM card and of the ledger's lists: `report`'s default --top, so the
// page and `report --format json` show the same rows.
constexpr size_t kOomLines = 10;
// The configurations the OOM card's what-if table tries beside the recorded one: the two knobs
// PyTorch's OOM message and its docs point at for fragmentation.
const std::vector<std::string> kOomWhatIfConfs = {"expandable_segments:True",
                                                  "max_split_size_mb:128"};
// Rows of each by-module table on the page (the largest; `report --top` shows fewer).
constexpr size_t kModuleRows = 200;

using nlohmann::json;

json table_json(const LiveTable& t) {
  json groups = json::array();
  for (const auto& g : t.groups) {
    json stacks = json::array();
    for (const auto& st : g.stacks) stacks.push_back({st.stack, st.bytes, st.count});
    groups.push_back(
        {{"site", g.site}, {"bytes", g.bytes}, {"count", g.count}, {"stacks", stacks}});
  }
  return {{"bytes", t.bytes},
          {"count", t.count},
          {"count_text", t.count_text},
          {"groups", groups},
          {"rest_bytes", t.rest_bytes},
          {"rest_groups", t.rest_groups},
          {"cached_free", t.cached_free ? json(*t.cached_free) : json(nullptr)}};
}

json layers_json(const std::vector<analysis::Breakdown>& layers) {
  json out = json::array();
  for (const auto& b : layers) {
    json j = {{"moment", b.moment},
              {"time_us", b.time_us},
              {"tracked", b.tracked},
              {"pytorch_text", analysis::pytorch_layers_text(b)},
              {"driver_text", analysis::driver_layers_text(b)}};
    if (b.moment == "oom") j["requested"] = b.oom_requested;
    if (b.moment == "peak") j["peak_name"] = analysis::layers_peak_name(b);
    if (b.has_pytorch) {
      j["reserved"] = b.pytorch_reserved;
      j["allocated"] = b.pytorch_allocated;
      j["cached_free"] = b.cached_free;
      j["largest_free_block"] = b.largest_free_block ? json(*b.largest_free_block) : json(nullptr);
    }
    if (b.driver_visible) {
      j["driver_visible"] = *b.driver_visible;
      j["untracked"] = b.untracked;
      if (b.context) {
        j["context"] = *b.context;
        j["other_untracked"] = b.other_untracked;
      }
    }
    j["other_libraries"] = b.other_libraries;
    out.push_back(std::move(j));
  }
  return out;
}

// `compact`: the chart only (the job page's small multiples).
json device_json(const ReportDevice& d, bool compact = false) {
  json xs = json::array(), totals = json::array(), reserved = json::array();
  json allocated = json::array(), driver = json::array(), entries = json::array();
  std::vector<json> columns(d.series.size(), json::array());
  for (const auto& p : d.points) {
    xs.push_back(p.x);
    entries.push_back(p.entry);
    totals.push_back(p.total);
    reserved.push_back(p.reserved);
    if (d.allocated_line) allocated.push_back(p.allocated);
    if (d.driver_line) driver.push_back(p.driver);
    for (size_t i = 0; i < columns.size() && i < p.series.size(); ++i)
      columns[i].push_back(p.series[i]);
  }
  json ooms = json::array(), bands = json::array(), marks = json::array(), sizes = json::array();
  for (const auto& o : d.ooms) ooms.push_back({o.x, o.requested, o.device_free});
  for (const auto& b : d.bands) bands.push_back({b.start, b.end, b.name});
  for (const auto& m : d.marks) marks.push_back({m.x, m.name});
  for (const auto& b : d.sizes) sizes.push_back({b.log2, b.count, b.bytes});
  json phases = json::array(), steps = json::array();
  for (const auto& p : d.phases) phases.push_back({p.start, p.end, p.name});
  for (const auto& st : d.steps) steps.push_back({st.x, st.step});
  json j = {{"device", d.device},
            {"time_axis", d.time_axis},
            {"x0", d.x_begin},
            {"x1", d.x_end},
            {"origin", d.time_origin},
            {"entries", d.entries},
            {"allocations", d.allocations},
            {"frees", d.frees},
            {"requests", d.requests},
            {"tensors_apart", d.tensors_apart},
            {"series", d.series},
            {"by_category", d.by_category},
            {"cache_series", d.cache_series},
            {"phases", phases},
            {"phase_count", d.phase_count},
            {"steps", steps},
            {"step_count", d.step_count},
            {"points",
             {{"x", xs},
              {"entry", entries},
              {"total", totals},
              {"reserved", reserved},
              {"allocated", d.allocated_line ? allocated : json(nullptr)},
              {"driver", d.driver_line ? driver : json(nullptr)},
              {"v", columns}}},
            {"pool_layer", d.pool_layer},
            {"peak",
             {{"bytes", d.peak_bytes},
              {"x", d.peak_x},
              {"reserved", d.peak_reserved},
              {"allocated", d.peak_allocated},
              {"driver", d.peak_driver}}},
            {"ooms", ooms},
            {"oom_count", d.oom_count},
            {"bands", bands},
            {"bands_dropped", d.bands_dropped},
            {"marks", marks},
            {"sizes", sizes}};
  if (compact) return j;
  j["layers"] = layers_json(d.layers);
  j["at_peak"] = table_json(d.at_peak);
  j["at_exit"] = table_json(d.at_exit);
  return j;
}

json tool_json(const snap::ToolSection& t) {
  return {{"exe", t.exe},
          {"argv", t.argv},
          {"pid", t.pid},
          {"hostname", t.hostname},
          {"rank", t.rank},
          {"reason", t.reason},
          {"ended", {{"how", t.ended.how}, {"code", t.ended.code}, {"signal", t.ended.signal}}},
          {"events_total", t.events_total},
          {"events_dropped", t.events_dropped},
          {"ring_error", t.ring_error},
          {"time_resolution_ns", t.time_resolution_ns},
          {"anomalies", t.anomalies.size()},
          {"vmm_handles", t.vmm_handles.size()},
          {"host_allocations", t.host_allocations.size()}};
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
}

std::string escape_html(const std::string& text) {
  std::string t = snap::to_valid_utf8(text);
  replace_all(t, "&", "&amp;");
  replace_all(t, "<", "&lt;");
  replace_all(t, ">", "&gt;");
  return t;
}

// The page's data as JSON that can sit inside a <script> element.
std::string script_json(const json& j) {
  std::string text = j.dump(-1, ' ', false, json::error_handler_t::replace);
  // '<' only occurs inside JSON strings, where \u003c means the same; "</script>" and "<!--"
  // can then never end or confuse the <script> element holding the data.
  replace_all(text, "<", "\\u003c");
  return text;
}

// Every page: the same shell, assets and data element; `data.page` says which page the script
// draws ("report", "job", "diff" or "whatif").
std::string page_html(const std::string& title, const std::string& data) {
  std::string out;
  out.reserve(data.size() + (256 << 10));
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  // The report must never reach the network: nothing but inline script/style and data: images.
  out +=
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>cumemtrace: " + escape_html(title) + "</title>\n<style>\n";
  out += assets::kReportCss;
  out +=
      "</style>\n</head>\n<body>\n<div id=\"app\"><noscript>This report needs JavaScript."
      "</noscript></div>\n<script type=\"application/json\" id=\"cumemtrace-data\">";
  out += data;
  out += "</script>\n<script>\n";
  out += assets::kReportJs;
  out += "</script>\n</body>\n</html>\n";
  return out;
}

// The what-if table as `whatif --format json` writes it (the same document, read back), and
// per device how its budget was found.
json whatif_json(const std::vector<analysis::WhatIfDevice>& r, const snap::Snapshot& s) {
  const analysis::SiteTable sites(s);
  std::ostringstream text;
  analysis::print_whatif_json(r, sites, text);
  json devices = json::array();
  for (const auto& w : r)
    devices.push_back({{"device", w.device},
                       {"torch_version", w.torch_version},
                       {"budget_source", w.budget_source},
                       {"requests", w.requests},
                       {"recorded_segment_events", w.recorded_segment_events},
                       {"empty_cache_calls", w.empty_cache_calls}});
  return {{"rows", json::parse(text.str())}, {"devices", std::move(devices)}, {"why", nullptr}};
}

// The OOM card's table, or why the run cannot be replayed (the card says so).
json oom_whatif_json(const snap::Snapshot& s) {
  try {
    return whatif_json(analysis::replay_whatif(s, {kOomWhatIfConfs, std::nullopt}), s);
  } catch (const std::exception& e) {
    return {{"rows", json::array()}, {"devices", json::array()}, {"why", e.what()}};
  }
}

}  // namespace

std::string report_data_json(const analysis::AnalysedSnapshot& view, const ReportModel& m,
                             const std::string& source_name) {
  const snap::Snapshot& s = view.snapshot();
  json stacks = json::object();
  for (const auto& st : m.stacks) {
    json frames = json::array();
    for (const auto& f : st.frames) frames.push_back({f.name, f.filename, f.line});
    stacks[std::to_string(st.id)] = frames;
  }
  json devices = json::array();
  for (const auto& d : m.devices) devices.push_back(device_json(d));
  // The OOM card: each verdict as `report --format json` writes it (the page finds its stack in
  // `stacks`).
  json ooms = json::array();
  if (!m.ooms.empty()) {
    const analysis::SiteTable sites(s);
    for (const auto& v : m.ooms) ooms.push_back(analysis::oom_verdict_json(v, sites, kOomLines));
  }
  // The ledger as `report --format json` writes it (pytorch_ledger): the page's numbers are
  // report's by construction.
  const analysis::SiteTable sites(s);
  const auto ledger = analysis::build_ledger(view, sites);
  // By module: each depth's table as `report --format json` writes it (its "modules").
  json modules = json::array();
  for (const auto& v : m.modules) modules.push_back(analysis::module_view_json(v, kModuleRows));
  json root = {{"page", "report"},
               {"source", source_name},
               {"stacks", stacks},
               {"devices", devices},
               {"ooms", ooms},
               {"ledger", ledger ? analysis::ledger_json(*ledger, kOomLines) : json(nullptr)},
               {"modules", modules},
               {"tool", s.tool ? tool_json(*s.tool) : json(nullptr)}};
  // The OOM card's what-if table: the recorded configuration and the usual alternatives.
  // Only for PyTorch's memory: a program without its allocator has nothing to replay.
  const bool pytorch =
      analysis::flavor_of(s) == analysis::Flavor::kTorch || (s.tool && s.tool->pytorch);
  if (!m.ooms.empty() && pytorch) root["whatif"] = oom_whatif_json(s);
  return script_json(root);
}

std::string render_html_report(const analysis::AnalysedSnapshot& view,
                               const std::string& source_name, const ReportOptions& opt) {
  const ReportModel model = build_report_model(view, opt);
  return page_html(source_name, report_data_json(view, model, source_name));
}

std::vector<size_t> charted_processes(const analysis::RankTable& table) {
  std::vector<size_t> out;
  if (table.processes.size() <= kJobChartsAll) {
    for (size_t k = 0; k < table.processes.size(); ++k) out.push_back(k);
    return out;
  }
  std::set<size_t> detail;
  for (const auto& r : table.rows) {
    if (r.flagged.empty()) continue;
    detail.insert(r.process);
    if (r.median_row) detail.insert(table.rows[*r.median_row].process);
  }
  if (table.first_oom)
    for (size_t k = 0; k < table.processes.size(); ++k)
      if (table.processes[k].file == table.first_oom->file) detail.insert(k);
  return {detail.begin(), detail.end()};
}

std::string render_job_html(const analysis::RankTable& table,
                            const std::vector<analysis::RankInput>& inputs,
                            const std::string& source_name, size_t skipped,
                            const std::vector<std::pair<std::string, std::string>>& unreadable,
                            size_t top) {
  ReportOptions small;
  small.max_buckets = kJobBuckets;
  small.top_sites = 5;
  small.max_groups = 0;
  small.max_bands = kJobBuckets;
  // Each charted process's chart, in the table's order (rank order), from its full snapshot.
  const std::vector<size_t> shown = charted_processes(table);
  json charts = json::array();
  for (size_t k : shown) {
    const auto& p = table.processes[k];
    const auto in = std::find_if(inputs.begin(), inputs.end(),
                                 [&](const analysis::RankInput& x) { return x.file == p.file; });
    if (in == inputs.end()) continue;
    const auto view = in->load();
    const ReportModel m = build_report_model(*view, small);
    json devices = json::array();
    for (const auto& d : m.devices) devices.push_back(device_json(d, true));
    charts.push_back({{"file", p.file}, {"process", p.name}, {"devices", std::move(devices)}});
  }
  json bad = json::array();
  for (const auto& [file, why] : unreadable) bad.push_back({{"file", file}, {"error", why}});
  const json root = {{"page", "job"},
                     {"source", source_name},
                     {"ranks", analysis::rank_table_json(table, top)},
                     {"charts", std::move(charts)},
                     {"charts_all_up_to", kJobChartsAll},
                     {"skipped_snapshots", skipped},
                     {"unreadable", std::move(bad)}};
  return page_html(source_name, script_json(root));
}

std::string render_diff_html(const analysis::Diff& d, const std::string& source_name) {
  std::ostringstream text;
  analysis::print_diff_json(d, text);
  const json root = {{"page", "diff"}, {"source", source_name}, {"diff", json::parse(text.str())}};
  return page_html(source_name, script_json(root));
}

std::string render_whatif_html(const std::vector<analysis::WhatIfDevice>& r,
                               const snap::Snapshot& s, const std::string& source_name) {
  const json root = {{"page", "whatif"}, {"source", source_name}, {"whatif", whatif_json(r, s)}};
  return page_html(source_name, script_json(root));
}

}  // namespace cumemtrace::viz
