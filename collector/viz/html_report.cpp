#include "viz/html_report.h"

#include <nlohmann/json.hpp>

#include "analysis/breakdown_format.h"
#include "analysis/frames.h"
#include "analysis/oom_verdict.h"
#include "snapshot/utf8.h"
#include "viz/report_assets.h"

namespace cumemtrace::viz {

namespace {

// Lines of "held by" in the OOM card: `report`'s default --top, so the two show the same rows.
constexpr size_t kOomLines = 10;
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

json device_json(const ReportDevice& d) {
  json xs = json::array(), totals = json::array(), reserved = json::array();
  json allocated = json::array(), driver = json::array();
  std::vector<json> columns(d.series.size(), json::array());
  for (const auto& p : d.points) {
    xs.push_back(p.x);
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
  return {{"device", d.device},
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
          {"phases", phases},
          {"phase_count", d.phase_count},
          {"steps", steps},
          {"step_count", d.step_count},
          {"points",
           {{"x", xs},
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
          {"layers", layers_json(d.layers)},
          {"ooms", ooms},
          {"oom_count", d.oom_count},
          {"bands", bands},
          {"bands_dropped", d.bands_dropped},
          {"marks", marks},
          {"at_peak", table_json(d.at_peak)},
          {"at_exit", table_json(d.at_exit)},
          {"sizes", sizes}};
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

}  // namespace

std::string report_data_json(const snap::Snapshot& s, const ReportModel& m,
                             const std::string& source_name) {
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
  // By module: each depth's table as `report --format json` writes it (its "modules").
  json modules = json::array();
  for (const auto& v : m.modules) modules.push_back(analysis::module_view_json(v, kModuleRows));
  json root = {{"source", source_name}, {"stacks", stacks},
               {"devices", devices},    {"ooms", ooms},
               {"modules", modules},    {"tool", s.tool ? tool_json(*s.tool) : json(nullptr)}};
  std::string text = root.dump(-1, ' ', false, json::error_handler_t::replace);
  // '<' only occurs inside JSON strings, where \u003c means the same; "</script>" and "<!--"
  // can then never end or confuse the <script> element holding the data.
  replace_all(text, "<", "\\u003c");
  return text;
}

std::string render_html_report(const snap::Snapshot& s, const std::string& source_name,
                               const ReportOptions& opt) {
  const ReportModel model = build_report_model(s, opt);
  std::string title = snap::to_valid_utf8(source_name);
  replace_all(title, "&", "&amp;");
  replace_all(title, "<", "&lt;");
  replace_all(title, ">", "&gt;");

  std::string out;
  out.reserve(1 << 20);
  out += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  // The report must never reach the network: nothing but inline script/style and data: images.
  out +=
      "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
      "script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>cumemtrace: " + title + "</title>\n<style>\n";
  out += assets::kReportCss;
  out +=
      "</style>\n</head>\n<body>\n<div id=\"app\"><noscript>This report needs JavaScript."
      "</noscript></div>\n<script type=\"application/json\" id=\"cumemtrace-data\">";
  out += report_data_json(s, model, source_name);
  out += "</script>\n<script>\n";
  out += assets::kReportJs;
  out += "</script>\n</body>\n</html>\n";
  return out;
}

}  // namespace cumemtrace::viz
