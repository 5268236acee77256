// Every view of one snapshot tells the same story (issue 16): the run summary, report (JSON), the
// HTML report's model, Perfetto and folded stacks show the same peak, the same top site at the
// peak and the same bytes live at exit, on a VMM-shaped cumemtrace file (4 x 2 MiB handles mapped,
// 2 unmapped again) where the HTML report once drew "peak 4 MiB at +0".
#include <catch2/catch.hpp>

#include <sstream>

#include <nlohmann/json.hpp>

#include "analysis/breakdown_format.h"
#include "analysis/frames.h"
#include "analysis/report.h"
#include "live/summary.h"
#include "viz/collapsed_writer.h"
#include "viz/html_report.h"
#include "viz/perfetto_writer.h"
#include "viz/report_model.h"

using namespace cumemtrace;

namespace {

constexpr uint64_t kMiB = 1 << 20;

snap::Snapshot vmm_snapshot() {
  snap::Snapshot s;
  s.stacks = {{{"libcuda.so.1", 0, "cuMemMap"},
               {"pool.cpp", 12, "Pool::grow(unsigned long)"},
               {"main.cpp", 3, "main"}}};
  auto& tr = s.device_traces.emplace_back();
  const int64_t t0 = 1'000'000;
  for (int i = 0; i < 4; ++i)
    tr.push_back(
        {snap::Action::kSegmentMap, 0x1000000 + i * 2 * kMiB, 2 * kMiB, 0, t0 + 10 + i, 0, 0, 7});
  for (int i = 0; i < 2; ++i)
    tr.push_back({snap::Action::kSegmentUnmap, 0x1000000 + i * 2 * kMiB, 2 * kMiB, 0, t0 + 20 + i,
                  -1, 0, 7});
  for (int i = 2; i < 4; ++i) {
    snap::Segment g;
    g.address = 0x1000000 + i * 2 * kMiB;
    g.total_size = g.allocated_size = g.active_size = g.requested_size = 2 * kMiB;
    g.is_expandable = true;
    g.stack = 0;
    g.blocks.push_back({g.address, 2 * kMiB, 2 * kMiB, "active_allocated", 0});
    s.segments.push_back(g);
  }
  snap::ToolSection t;
  t.pid = 42;
  t.exe = "/usr/bin/vmm";
  t.start_time_us = t0;
  t.end_time_us = t0 + 30;
  t.ended.how = "exit";
  t.events_total = 14;
  t.devices = {{0, 8 * kMiB, t0 + 13, 8 * kMiB, 4, 0}};
  for (int i = 0; i < 4; ++i)
    t.vmm_handles.push_back({uint64_t(0x10 + i), 2 * kMiB, 0, 0, t0 + 5 + i});
  t.driver_memory = {{t0 + 1, 0, 300 * kMiB}, {t0 + 25, 0, 310 * kMiB}};
  s.tool = t;
  return s;
}

// vmm_snapshot() with a 250 MiB primary context on device 0 from before the first map to the end,
// and a created one of `created` bytes that ended before the exit sample (its bytes are gone by
// then).
snap::Snapshot vmm_snapshot_with_contexts(uint64_t created) {
  auto s = vmm_snapshot();
  const int64_t t0 = 1'000'000;
  s.tool->contexts = {{0, 250 * kMiB, t0 + 1, 0, "cuDevicePrimaryCtxRetain", 0xc0},
                      {0, created, t0 + 2, t0 + 24, "cuCtxCreate", 0xc1}};
  return s;
}

// `report --format json` of a snapshot.
nlohmann::json report_json(const snap::Snapshot& s) {
  const analysis::SiteTable sites(s);
  std::ostringstream js;
  analysis::print_report_json(analysis::build_report(s, sites, "vmm.json"), s, sites, {}, js);
  return nlohmann::json::parse(js.str());
}

uint64_t collapsed_total(const std::string& text) {
  uint64_t sum = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) sum += std::stoull(line.substr(line.rfind(' ') + 1));
  return sum;
}

}  // namespace

TEST_CASE("summary, report, HTML model, Perfetto and folded stacks agree on a VMM run") {
  const auto s = vmm_snapshot();
  const analysis::SiteTable sites(s);
  const auto r = analysis::build_report(s, sites, "vmm.json");
  std::ostringstream js;
  analysis::print_report_json(r, s, sites, {}, js);
  const auto j = nlohmann::json::parse(js.str());
  const auto m = viz::build_report_model(s);
  REQUIRE(m.devices.size() == 1);
  const auto& d = m.devices[0];

  // The peak: 8 MiB after the fourth map, not at the start.
  REQUIRE(j["devices"][0]["peak_bytes"] == 8 * kMiB);
  REQUIRE(d.peak_bytes == 8 * kMiB);
  REQUIRE(d.peak_x == 1'000'013);
  REQUIRE(d.points.front().total == 0);  // nothing drawn before the first map
  REQUIRE(collapsed_total(viz::to_collapsed(s, viz::CollapsedMoment::kPeak)) == 8 * kMiB);
  uint64_t perfetto_peak = 0;
  uint64_t driver_samples = 0;
  const auto trace = nlohmann::json::parse(viz::to_perfetto(s));
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "C" && e["name"] == "live")
      perfetto_peak = std::max(perfetto_peak, e["args"]["bytes"].get<uint64_t>());
    if (e["ph"] == "C" && e["name"] == "driver-visible") ++driver_samples;
  }
  REQUIRE(perfetto_peak == 8 * kMiB);
  REQUIRE(driver_samples == 2);
  const std::string summary = collect::summarize(s);
  REQUIRE(summary.find("peak device 0 8.00 MiB") != std::string::npos);

  // The top site at the peak, one rule everywhere.
  REQUIRE(j["devices"][0]["at_peak"][0]["site"] == "Pool::grow(...) (pool.cpp:12)");
  REQUIRE(d.at_peak.groups.at(0).site == "Pool::grow(...) (pool.cpp:12)");

  // Live at exit: the four handles still held.
  REQUIRE(j["devices"][0]["live_at_exit_bytes"] == 8 * kMiB);
  REQUIRE(d.at_exit.bytes == 8 * kMiB);
  REQUIRE(collapsed_total(viz::to_collapsed(s, viz::CollapsedMoment::kExit)) == 8 * kMiB);
  REQUIRE(summary.find("live at exit 8.00 MiB") != std::string::npos);

  // Sizes: the four mappings are the program's requests.
  REQUIRE(j["size_histogram"].size() == 1);
  REQUIRE(j["size_histogram"][0]["count"] == 4);
  REQUIRE(d.sizes.size() == 1);
  REQUIRE(d.sizes[0].count == 4);

  // Driver-visible at exit: 310 MiB = 4 MiB tracked (still mapped) + 306 MiB untracked.
  const auto& exit = j["devices"][0]["layers"].back();
  REQUIRE(exit["moment"] == "exit");
  REQUIRE(exit["driver_visible_bytes"] == 310 * kMiB);
  REQUIRE(exit["untracked_bytes"] == 306 * kMiB);
  REQUIRE(exit["context_bytes"] == nullptr);
  REQUIRE(exit["other_untracked_bytes"] == nullptr);
  REQUIRE(summary.find("driver-visible 310 MiB = untracked 306 MiB (CUDA context not measured) + "
                       "tracked 4 MiB") != std::string::npos);
}

TEST_CASE("a context measured at creation splits untracked the same way in every view") {
  const auto s = vmm_snapshot_with_contexts(40 * kMiB);
  const int64_t t0 = 1'000'000;
  const analysis::SiteTable sites(s);
  const auto r = analysis::build_report(s, sites, "vmm.json");
  const auto j = report_json(s);
  const auto m = viz::build_report_model(s);
  const std::string summary = collect::summarize(s);

  // At exit: 310 MiB = 250 MiB context + 56 MiB other untracked + 4 MiB tracked.
  const auto& exit = j["devices"][0]["layers"].back();
  REQUIRE(exit["moment"] == "exit");
  REQUIRE(exit["untracked_bytes"] == 306 * kMiB);
  REQUIRE(exit["context_bytes"] == 250 * kMiB);
  REQUIRE(exit["other_untracked_bytes"] == 56 * kMiB);
  const auto& mx = m.devices.at(0).layers.back();
  REQUIRE(mx.moment == "exit");
  REQUIRE(mx.context == 250 * kMiB);
  REQUIRE(mx.other_untracked == 56 * kMiB);
  const std::string text =
      "driver-visible 310 MiB = CUDA context 250 MiB + other untracked 56 MiB + tracked 4 MiB";
  REQUIRE(summary.find(text) != std::string::npos);
  REQUIRE(analysis::driver_layers_text(mx) == text + " (pool.cpp 4 MiB)");

  // At the peak (+13 us, the sample of +1 us: 300 MiB) both contexts are in being: 290 MiB of
  // contexts, 300 - 8 - 290 = 2 MiB other untracked.
  const auto& peak = j["devices"][0]["layers"].front();
  REQUIRE(peak["moment"] == "peak");
  REQUIRE(peak["driver_visible_bytes"] == 300 * kMiB);
  REQUIRE(peak["context_bytes"] == 290 * kMiB);
  REQUIRE(peak["other_untracked_bytes"] == 2 * kMiB);
  REQUIRE(m.devices.at(0).layers.front().context == 290 * kMiB);

  // The report lists the contexts with exact bytes and their ends.
  const auto& cs = j["devices"][0]["contexts"];
  REQUIRE(cs.size() == 2);
  REQUIRE(cs[0]["bytes"] == 250 * kMiB);
  REQUIRE(cs[0]["end_time_us"] == nullptr);
  REQUIRE(cs[1]["api"] == "cuCtxCreate");
  REQUIRE(cs[1]["end_time_us"] == t0 + 24);
  std::ostringstream text_report;
  analysis::print_report_text(r, s, sites, {}, text_report);
  REQUIRE(text_report.str().find("CUDA context (measured at creation): 250 MiB from "
                                 "cuDevicePrimaryCtxRetain at +0.000001 s\n") != std::string::npos);
  REQUIRE(text_report.str().find("CUDA context (measured at creation): 40.0 MiB from cuCtxCreate "
                                 "at +0.000002 s, destroyed at +0.000024 s\n") !=
          std::string::npos);
}

TEST_CASE("a sample below the tracked bytes and the contexts in being says nothing of a moment") {
  // At the peak (+13 us) the sample of +1 us says 300 MiB, but 8 MiB is tracked and 250 + 45 MiB
  // of contexts are in being: 303 MiB at least, so the sample predates the peak (it would leave
  // "other untracked -3 MiB"). At exit, 310 MiB = 250 context + 56 other + 4 tracked, as before.
  const auto s = vmm_snapshot_with_contexts(45 * kMiB);
  const auto j = report_json(s);
  const auto m = viz::build_report_model(s);

  const auto& peak = j["devices"][0]["layers"].front();
  REQUIRE(peak["moment"] == "peak");
  REQUIRE(peak["driver_visible_bytes"] == nullptr);
  REQUIRE(peak["untracked_bytes"] == nullptr);
  REQUIRE(peak["context_bytes"] == nullptr);
  REQUIRE(peak["other_untracked_bytes"] == nullptr);
  const auto& mp = m.devices.at(0).layers.front();
  REQUIRE(mp.moment == "peak");
  REQUIRE_FALSE(mp.driver_visible);
  REQUIRE(analysis::driver_layers_text(mp).empty());

  const auto& exit = j["devices"][0]["layers"].back();
  REQUIRE(exit["moment"] == "exit");
  REQUIRE(exit["driver_visible_bytes"] == 310 * kMiB);
  REQUIRE(exit["context_bytes"] == 250 * kMiB);
  REQUIRE(exit["other_untracked_bytes"] == 56 * kMiB);
}

TEST_CASE("an expandable-segments PyTorch file: tensors start when allocated, layers agree") {
  snap::Snapshot s;  // PyTorch's own file: everything pytorch-sourced
  s.stacks = {{{"model.py", 7, "forward"}}};
  auto& tr = s.device_traces.emplace_back();
  tr.push_back({snap::Action::kSegmentMap, 0x100000, 20 * kMiB, 0, 100, 0, 0, 0});
  tr.push_back({snap::Action::kAlloc, 0x100000, 6 * kMiB, 0, 101, 0, 0, 0});
  tr.push_back({snap::Action::kAlloc, 0x700000, 8 * kMiB, 0, 102, 0, 0, 0});
  tr.push_back({snap::Action::kFreeCompleted, 0x700000, 8 * kMiB, 0, 103, 0, 0, 0});
  snap::Segment g;
  g.address = 0x100000;
  g.total_size = 20 * kMiB;
  g.is_expandable = true;
  g.blocks = {{0x100000, 6 * kMiB, 6 * kMiB, "active_allocated", 0},
              {0x700000, 14 * kMiB, 0, "inactive", snap::kNoStack}};
  s.segments.push_back(g);
  const analysis::SiteTable sites(s);
  const auto r = analysis::build_report(s, sites, "torch.json");
  const auto m = viz::build_report_model(s);
  const auto& d = m.devices.at(0);
  REQUIRE(r.devices.at(0).timeline.peak_bytes == 14 * kMiB);
  REQUIRE(d.peak_bytes == 14 * kMiB);
  REQUIRE(d.peak_x == 102);
  REQUIRE(d.points.front().total == 0);
  REQUIRE(d.points.front().reserved == 0);  // the reserved line starts at the first map
  REQUIRE(collapsed_total(viz::to_collapsed(s, viz::CollapsedMoment::kPeak)) == 14 * kMiB);
  REQUIRE(collapsed_total(viz::to_collapsed(s, viz::CollapsedMoment::kExit)) == 6 * kMiB);
  REQUIRE(d.at_exit.bytes == 6 * kMiB);
  REQUIRE(r.devices.at(0).live_at_exit_bytes == 6 * kMiB);
  const auto& exit = r.devices.at(0).layers.back();
  REQUIRE(exit.pytorch_reserved == 20 * kMiB);
  REQUIRE(exit.pytorch_allocated == 6 * kMiB);
  REQUIRE(exit.cached_free == 14 * kMiB);
  REQUIRE(exit.largest_free_block == 14 * kMiB);

  // Its layers "at the peak" describe the reserved peak (+100 us: 20 MiB mapped, 0 allocated), not
  // the allocated peak of "live at the peak" (+102 us): every view names it so.
  const auto& peak = r.devices.at(0).layers.front();
  REQUIRE(peak.moment == "peak");
  REQUIRE(peak.time_us == 100);
  REQUIRE(peak.reserved_peak);
  REQUIRE(analysis::layers_peak_name(peak) == "the reserved peak");
  std::ostringstream text;
  analysis::print_report_text(r, s, sites, {}, text);
  REQUIRE(text.str().find("  memory layers at the reserved peak (+0.000000 s):\n    device 0: "
                          "reserved 20 MiB = allocated 0 B + cached 20 MiB free") !=
          std::string::npos);
  REQUIRE(text.str().find("memory layers at the peak") == std::string::npos);
  const auto page = nlohmann::json::parse(viz::report_data_json(s, m, "torch.json"));
  REQUIRE(page["devices"][0]["layers"][0]["moment"] == "peak");
  REQUIRE(page["devices"][0]["layers"][0]["peak_name"] == "the reserved peak");
}
