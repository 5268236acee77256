// Every view of one snapshot tells the same story (issue 16): the run summary, report (JSON), the
// HTML report's model, Perfetto and folded stacks show the same peak, the same top site at the
// peak and the same bytes live at exit, on a VMM-shaped cumemtrace file (4 x 2 MiB handles mapped,
// 2 unmapped again) where the HTML report once drew "peak 4 MiB at +0".
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>

#include <nlohmann/json.hpp>

#include "analysis/breakdown_format.h"
#include "analysis/frames.h"
#include "analysis/model.h"
#include "live/summary.h"
#include "pytorch/categories.h"
#include "pytorch/phases.h"
#include "support/snapshot_builder.h"
#include "support/torch_oom_snapshot.h"
#include "verdicts/check.h"
#include "verdicts/diff.h"
#include "verdicts/process_summary.h"
#include "verdicts/rank_table.h"
#include "verdicts/report.h"
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
                       "tracked 4.00 MiB") != std::string::npos);
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
      "driver-visible 310 MiB = CUDA context 250 MiB + other untracked 56.0 MiB + tracked 4.00 MiB";
  REQUIRE(summary.find(text) != std::string::npos);
  REQUIRE(analysis::driver_layers_text(mx) == text + " (pool.cpp 4.00 MiB)");

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
  // "other untracked -3.00 MiB"). At exit, 310 MiB = 250 context + 56 other + 4 tracked, as before.
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
  REQUIRE(r.devices.at(0).timeline.trace.bytes == 14 * kMiB);
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
                          "reserved 20.0 MiB = allocated 0 B + cached 20.0 MiB free") !=
          std::string::npos);
  REQUIRE(text.str().find("memory layers at the peak") == std::string::npos);
  const auto page = nlohmann::json::parse(viz::report_data_json(s, m, "torch.json"));
  REQUIRE(page["devices"][0]["layers"][0]["moment"] == "peak");
  REQUIRE(page["devices"][0]["layers"][0]["peak_name"] == "the reserved peak");
}

namespace {

// A cumemtrace file of a PyTorch run: one 20 MiB segment, opened (cudaMalloc'd) for a 2 MiB
// tensor of line A, then holding two 8 MiB tensors of line B; 2 MiB of it free in PyTorch's cache.
// Beside it cuBLAS's 4 MiB workspace under line C. One forward phase, one step, a user band.
snap::Snapshot pytorch_segments_snapshot() {
  snap::Snapshot s;
  const std::string torch = "/venv/lib/python3.11/site-packages/torch/";
  s.stacks = {{{torch + "nn/modules/linear.py", 134, "Linear.forward"}, {"/w/train.py", 10, "a"}},
              {{torch + "nn/functional.py", 1723, "relu"}, {"/w/train.py", 20, "b"}},
              {{"/usr/lib/libcudart.so.13", 0, "cudaMalloc"},
               {"/venv/nvidia/lib/libcublasLt.so.13", 0, "cublasLtMatmul"},
               {"/w/train.py", 30, "c"}}};
  const int64_t t0 = 1'000'000;
  auto& tr = s.device_traces.emplace_back();
  using A = snap::Action;
  using C = snap::Category;
  auto add = [&](A a, uint64_t addr, uint64_t size, int64_t t, int32_t stack, snap::Source src,
                 C cat) {
    snap::TraceEntry e;
    e.action = a, e.addr = addr, e.size = size, e.time_us = t0 + t, e.stack = stack;
    e.source = src, e.category = cat;
    tr.push_back(e);
  };
  const auto pt = snap::Source::kPytorch, drv = snap::Source::kDriver;
  const uint64_t seg = 0x7f0000000000;
  add(A::kSegmentAlloc, seg, 20 * kMiB, 1, 0, pt, C::kUnknown);
  add(A::kAlloc, seg, 2 * kMiB, 2, 0, pt, C::kParameter);
  add(A::kAlloc, seg + 2 * kMiB, 8 * kMiB, 3, 1, pt, C::kActivation);
  add(A::kAlloc, seg + 10 * kMiB, 8 * kMiB, 4, 1, pt, C::kActivation);
  add(A::kSegmentAlloc, 0x7e0000000000, 4 * kMiB, 5, -1, drv, C::kLibrary);
  add(A::kAlloc, 0x7e0000000000, 4 * kMiB, 5, 2, drv, C::kLibrary);
  snap::Segment g;
  g.address = seg;
  g.total_size = 20 * kMiB;
  g.source = pt;
  g.stack = 0;
  g.blocks = {{seg, 2 * kMiB, 2 * kMiB, "active_allocated", 0},
              {seg + 2 * kMiB, 8 * kMiB, 8 * kMiB, "active_allocated", 1},
              {seg + 10 * kMiB, 8 * kMiB, 8 * kMiB, "active_allocated", 1},
              {seg + 18 * kMiB, 2 * kMiB, 0, "inactive", -1}};
  s.segments.push_back(g);
  snap::Segment w;
  w.address = 0x7e0000000000;
  w.total_size = 4 * kMiB;
  w.stack = 2;
  w.blocks = {{w.address, 4 * kMiB, 4 * kMiB, "active_allocated", 2}};  // as the collector writes
  s.segments.push_back(w);
  s.annotations = {{"epoch", "START", 0, t0},
                   {"auto:forward", "START", 0, t0 + 2},
                   {"auto:forward", "END", 0, t0 + 4},
                   {"auto:step", "MARK", 0, t0 + 5},
                   {"epoch", "END", 0, t0 + 6}};
  snap::ToolSection t;
  t.pid = 7;
  t.exe = "/usr/bin/python3";
  t.start_time_us = t0;
  t.end_time_us = t0 + 10;
  t.ended.how = "exit";
  t.events_total = 6;
  s.tool = t;
  return s;
}

}  // namespace

TEST_CASE("PyTorch's memory is blamed on its tensors, its cache is its own line, in every view") {
  const auto s = pytorch_segments_snapshot();
  const analysis::SiteTable sites(s);
  const std::string a = "a (train.py:10) via Linear.forward (linear.py:134)";
  const std::string b = "b (train.py:20) via relu (functional.py:1723)";
  const std::string c = "c (train.py:30)";

  // report (JSON): B's 16 MiB, not A's segment of 20; A 2 MiB; cuBLAS 4 MiB; the cache 2 MiB.
  const auto j = report_json(s);
  const auto& dj = j["devices"][0];
  REQUIRE(dj["peak_bytes"] == 24 * kMiB);
  REQUIRE(dj["at_peak"].size() == 3);
  REQUIRE(dj["at_peak"][0]["site"] == b);
  REQUIRE(dj["at_peak"][0]["bytes"] == 16 * kMiB);
  REQUIRE(dj["at_peak"][0]["count"] == 2);
  REQUIRE(dj["at_peak"][1]["site"] == c);
  REQUIRE(dj["at_peak"][1]["bytes"] == 4 * kMiB);
  REQUIRE(dj["at_peak"][2]["site"] == a);
  REQUIRE(dj["at_peak"][2]["bytes"] == 2 * kMiB);
  REQUIRE(dj["at_peak_cached_free_bytes"] == 2 * kMiB);
  REQUIRE(dj["at_exit_cached_free_bytes"] == 2 * kMiB);

  // report (text): the cache a line of its own, no site's.
  std::ostringstream text;
  analysis::print_report_text(analysis::build_report(s, sites, "pt.json"), s, sites, {}, text);
  REQUIRE(text.str().find("     16.0 MiB         2  " + b + "\n") != std::string::npos);
  REQUIRE(text.str().find("      2.00 MiB            cached, free in PyTorch's cache\n") !=
          std::string::npos);
  REQUIRE(text.str().find("  at exit, cached, free in PyTorch's cache: 2.00 MiB\n") !=
          std::string::npos);

  // The HTML model: the same rows, the cache apart; tensors + cache + others = the peak.
  const auto m = viz::build_report_model(s);
  REQUIRE(m.devices.size() == 1);
  const auto& d = m.devices[0];
  REQUIRE(d.at_peak.groups.size() == 3);
  REQUIRE(d.at_peak.groups[0].site == b);
  REQUIRE(d.at_peak.groups[0].bytes == 16 * kMiB);
  REQUIRE(d.at_peak.groups[2].site == a);
  REQUIRE(d.at_peak.groups[2].bytes == 2 * kMiB);
  REQUIRE(d.at_peak.cached_free == 2 * kMiB);
  REQUIRE(d.at_peak.bytes + *d.at_peak.cached_free == 24 * kMiB);
  // At exit the table's bytes are what the program holds, report's "live at exit"; the cache
  // beside them.
  REQUIRE(d.at_exit.bytes == 22 * kMiB);
  REQUIRE(dj["live_at_exit_bytes"] == 22 * kMiB);
  REQUIRE(d.at_exit.cached_free == 2 * kMiB);

  // Its timeline by category: the series add up to the live bytes at every point.
  REQUIRE(d.by_category);
  // PyTorch's segment events ("unknown" for the viewer's sake) are no series: their bytes are
  // the tensors' and the cache's.
  REQUIRE(d.series == std::vector<std::string>{"parameter", "activation", "library", "cache"});
  for (const auto& p : d.points)
    REQUIRE(std::accumulate(p.series.begin(), p.series.end(), uint64_t{0}) == p.total);
  const auto& last = d.points.back();
  REQUIRE(last.total == 24 * kMiB);
  REQUIRE(last.series == std::vector<uint64_t>{2 * kMiB, 16 * kMiB, 4 * kMiB, 2 * kMiB});
  // Before the first tensor the new segment is all cache.
  REQUIRE(std::any_of(d.points.begin(), d.points.end(), [](const viz::TimelinePoint& p) {
    return p.total == 20 * kMiB && p.series == std::vector<uint64_t>{0, 0, 0, 20 * kMiB};
  }));

  // The automatic phase and step apart from the user's band.
  REQUIRE(d.bands.size() == 1);
  REQUIRE(d.bands[0].name == "epoch");
  REQUIRE(d.marks.empty());
  REQUIRE(d.phases.size() == 1);
  REQUIRE(d.phases[0].name == "forward");
  REQUIRE(d.phases[0].end - d.phases[0].start == 3);  // [START, END], END's microsecond in
  REQUIRE(d.steps.size() == 1);
  REQUIRE(d.steps[0].step == 1);

  // Folded stacks at the peak: the cache a root of its own, the total the peak.
  const std::string folded = viz::to_collapsed(s, viz::CollapsedMoment::kPeak);
  REQUIRE(collapsed_total(folded) == 24 * kMiB);
  REQUIRE(folded.find("cuda:0;<cached, free in PyTorch's cache> " + std::to_string(2 * kMiB)) !=
          std::string::npos);

  // check --max-peak-bytes: the stacks are the tensors' lines; the cache is said, not blamed.
  analysis::CheckOptions o;
  o.max_peak_bytes = 1;
  const auto r = analysis::evaluate_check({{"pt.json", s}}, o);
  bool found = false;
  for (const auto& f : r.findings) {
    if (f.check != "peak-bytes") continue;
    found = true;
    REQUIRE(f.message.find("; 2.00 MiB of it cached, free in PyTorch's cache") !=
            std::string::npos);
    REQUIRE(f.stacks.size() == 3);
    REQUIRE(f.stacks[0].title == "16.0 MiB live in 2 allocations from " + b);
  }
  REQUIRE(found);

  // diff: B's tensors grew by 8 MiB and the cache shrank by as much; A's segment changed nothing.
  auto grown = s;
  auto& tr = grown.device_traces[0];
  snap::TraceEntry extra = tr[3];
  extra.addr = 0x7f0000000000 + 18 * kMiB;  // B takes the cache's 2 MiB too
  extra.size = 2 * kMiB;
  tr.insert(tr.begin() + 4, extra);
  grown.segments[0].blocks[3] = {0x7f0000000000 + 18 * kMiB, 2 * kMiB, 2 * kMiB, "active_allocated",
                                 1};
  const auto dd = analysis::diff_snapshots(s, "a.json", grown, "b.json");
  std::map<std::string, std::pair<uint64_t, uint64_t>> peak;
  for (const auto& x : dd.sites) peak[x.site] = {x.base_peak, x.new_peak};
  REQUIRE(peak.size() == 2);
  REQUIRE(peak[b] == std::pair<uint64_t, uint64_t>{16 * kMiB, 18 * kMiB});
  REQUIRE(peak["cached, free in PyTorch's cache"] == std::pair<uint64_t, uint64_t>{2 * kMiB, 0});
}

TEST_CASE(
    "a chart by site stacks PyTorch's tensors at their lines, never a segment at its trigger's") {
  // The same run without categories: the chart is stacked by site. A's 2 MiB tensor opened the
  // 20 MiB segment; the segment's bytes are B's tensors, A's and the cache, never 20 MiB at A.
  auto s = pytorch_segments_snapshot();
  for (auto& e : s.device_traces[0]) e.category = snap::Category::kNone;
  const std::string a = "a (train.py:10) via Linear.forward (linear.py:134)";
  const std::string b = "b (train.py:20) via relu (functional.py:1723)";
  const std::string c = "c (train.py:30)";
  const auto m = viz::build_report_model(s);
  const auto& d = m.devices.at(0);
  REQUIRE_FALSE(d.by_category);
  REQUIRE(d.cache_series);
  // By byte-time: B 16 MiB from t=3 and 4, A 2 MiB from t=2, C 4 MiB from t=5; the cache last.
  REQUIRE(d.series == std::vector<std::string>{b, a, c, "cache"});
  for (const auto& p : d.points)
    REQUIRE(std::accumulate(p.series.begin(), p.series.end(), uint64_t{0}) == p.total);
  REQUIRE(d.points.back().series == std::vector<uint64_t>{16 * kMiB, 2 * kMiB, 4 * kMiB, 2 * kMiB});
  // The segment before its first tensor: all cache, no line's.
  REQUIRE(std::any_of(d.points.begin(), d.points.end(), [](const viz::TimelinePoint& p) {
    return p.total == 20 * kMiB && p.series == std::vector<uint64_t>{0, 0, 0, 20 * kMiB};
  }));
  // The page's data says the last series is the cache.
  const auto page = nlohmann::json::parse(viz::report_data_json(s, m, "pt.json"));
  REQUIRE(page["devices"][0]["cache_series"] == true);
  REQUIRE(page["devices"][0]["points"]["entry"].back() == s.device_traces[0].size());
}

TEST_CASE("an OOM: report's first section and the HTML's OOM card say the same") {
  snap::Snapshot s = testing::training_oom_snapshot();
  analysis::label_categories(s);
  const analysis::SiteTable sites(s);
  const auto r = analysis::build_report(s, sites, "train.4321.oom.json");
  std::ostringstream rj;
  analysis::print_report_json(r, s, sites, {}, rj);
  const auto ooms = nlohmann::json::parse(rj.str())["ooms"];
  REQUIRE(ooms.size() == 1);

  // The page's data: the same verdict, item for item, and the failing request's stack with it.
  const auto m = viz::build_report_model(s);
  const auto page = nlohmann::json::parse(viz::report_data_json(s, m, "train.4321.oom.json"));
  REQUIRE(page["ooms"].size() == 1);
  const auto& card = page["ooms"][0];
  auto item = ooms[0];
  item.erase("frames");  // report's own rendering of the stack; the page has it in `stacks`
  CHECK(card == item);
  CHECK(card["verdict"] == "exhaustion");
  CHECK(card["requested_bytes"] == 16 * kMiB);
  CHECK(card["cached_free_bytes"] == 10 * kMiB);
  CHECK(card["shortfall_bytes"] == 6 * kMiB);
  CHECK(card["held_by_category"] ==
        nlohmann::json::parse(R"({"activation": 31457280, "parameter": 25165824})"));
  CHECK(card["held_by_site"][0]["site"] == "forward (model.py:40)");
  CHECK(card["site"] == "forward (model.py:44)");
  REQUIRE(page["stacks"].contains(std::to_string(card["stack"].get<int>())));
  CHECK(page["stacks"][std::to_string(card["stack"].get<int>())][0] ==
        nlohmann::json::parse(R"(["forward", "model.py", 44])"));

  // The card's lines are report's lines: the verdict line, each fact, each advice.
  std::ostringstream text;
  analysis::print_report_text(r, s, sites, {}, text);
  const std::string t = text.str();
  CHECK(t.find("\n  " + card["line"].get<std::string>() + "\n") != std::string::npos);
  REQUIRE(card["facts"].size() == 4);
  for (const auto& f : card["facts"])
    CHECK(t.find("\n  " + f.get<std::string>() + "\n") != std::string::npos);
  REQUIRE(card["advice"].size() == 3);
  for (const auto& a : card["advice"])
    CHECK(t.find("\n  advice: " + a.get<std::string>() + "\n") != std::string::npos);
}

TEST_CASE("a downsampled chart keeps each bucket's highest tensors under a steady cache") {
  // 1,000 steps in one 100 MiB PyTorch segment: each allocates four 8 MiB activations, then
  // frees them. The segment (the live bytes) never moves; the chart must still show the tensors
  // rise to 32 MiB in every bucket, not a bucket's first moment.
  snap::Snapshot s;
  s.stacks = {{{"/w/train.py", 10, "forward"}}};
  auto& tr = s.device_traces.emplace_back();
  int64_t t = 1'000'000;
  auto add = [&](snap::Action a, uint64_t addr, uint64_t size, snap::Category c) {
    snap::TraceEntry e;
    e.action = a, e.addr = addr, e.size = size, e.time_us = ++t, e.stack = 0;
    e.source = snap::Source::kPytorch, e.category = c;
    tr.push_back(e);
  };
  const uint64_t seg = 0x7f0000000000;
  add(snap::Action::kSegmentAlloc, seg, 100 * kMiB, snap::Category::kUnknown);
  for (int step = 0; step < 1000; ++step) {
    for (uint64_t i = 0; i < 4; ++i)
      add(snap::Action::kAlloc, seg + i * 8 * kMiB, 8 * kMiB, snap::Category::kActivation);
    for (uint64_t i = 0; i < 4; ++i)
      add(snap::Action::kFreeCompleted, seg + i * 8 * kMiB, 8 * kMiB, snap::Category::kActivation);
  }
  snap::Segment g;
  g.address = seg, g.total_size = 100 * kMiB, g.source = snap::Source::kPytorch, g.stack = 0;
  g.blocks = {{seg, 100 * kMiB, 0, "inactive", -1}};
  s.segments.push_back(g);
  snap::ToolSection tool;
  tool.pid = 1, tool.start_time_us = 1'000'000, tool.end_time_us = t, tool.ended.how = "exit";
  s.tool = tool;
  viz::ReportOptions opt;
  opt.max_buckets = 10;
  const auto d = viz::build_report_model(s, opt).devices.at(0);
  REQUIRE(d.cache_series);
  REQUIRE(d.series == std::vector<std::string>{"activation", "cache"});
  REQUIRE(d.points.size() <= 2 * opt.max_buckets + 1);
  size_t highest = 0;
  for (const auto& p : d.points) {
    REQUIRE((p.total == 100 * kMiB || &p == &d.points.front()));  // the first: before the trace
    highest += p.series[0] == 32 * kMiB;
  }
  // Every bucket (five by entries, five by time: the same cuts here) shows the 32 MiB.
  REQUIRE(highest == 5);
}

namespace {

// Rank r of 3 on its own device r: weights, 3 automatic steps of a temporary; rank 1 keeps
// `extra` a step (flagged against the median).
cumemtrace::snap::Snapshot job_rank(int rank, uint64_t extra) {
  cumemtrace::testing::SnapshotBuilder b(3);
  auto& t = b.tool();
  t.pid = 100 + rank;
  t.rank = {{"RANK", std::to_string(rank)}, {"WORLD_SIZE", "3"}};
  const auto w = b.site("load_weights", "train.py", 5);
  const auto f = b.site("forward", "train.py", 10);
  const auto c = b.site("cache", "train.py", 20);
  b.alloc(0x10000000, 1024u << 20, w, rank);
  for (uint64_t step = 0; step < 3; ++step) {
    b.alloc(0x80000000, 100u << 20, f, rank);
    if (extra) b.alloc(0xa0000000 + step * 0x10000000, extra, c, rank);
    b.free(0x80000000, rank);
    b.mark("auto:step", rank);
  }
  return b.finish();
}

}  // namespace

TEST_CASE("the job page and its rank table replay each in-memory snapshot's devices once") {
  namespace a = cumemtrace::analysis;
  const std::vector<cumemtrace::snap::Snapshot> snaps = {job_rank(0, 0), job_rank(1, 80u << 20),
                                                         job_rank(2, 0)};
  std::vector<a::ProcessSummary> summaries;
  for (const auto& s : snaps) summaries.push_back(a::summarize_snapshot(s, ""));
  const uint64_t replays = a::DeviceReplay::built(), phases = a::Phases::built();
  std::vector<a::RankInput> in;
  for (size_t i = 0; i < snaps.size(); ++i)
    in.push_back({"r" + std::to_string(i) + ".json", &summaries[i], a::in_memory(snaps[i])});
  const a::RankTable table = a::build_rank_table(in, {});
  REQUIRE(table.rows.size() == 3);
  CHECK_FALSE(table.rows[1].flagged.empty());  // the rank table compared it with the median
  const std::string page = cumemtrace::viz::render_job_html(table, in, "job", 0, {}, 10);
  CHECK(page.find("\"page\":\"job\"") != std::string::npos);
  // One view per snapshot for the rank table and the page: the flagged rank and the median rank
  // replay their 3 devices once each for their reports (6), which their divergence and their
  // charts reuse; the third rank's chart replays the one device it used (1). Before, each consumer
  // replayed on its own: 6 + 2 (the divergence) + 3 (the charts). Phases: once per snapshot asked.
  CHECK(a::DeviceReplay::built() - replays == 6 + 1);
  CHECK(a::Phases::built() - phases == 3);
}
