#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <numeric>

#include "support/sample_snapshots.h"
#include "viz/report_model.h"

using namespace cumemtrace;
using namespace cumemtrace::viz;

TEST_CASE("report model of the leak snapshot") {
  const auto m = build_report_model(testing::leak_snapshot());
  REQUIRE(m.devices.size() == 1);
  const auto& d = m.devices[0];
  REQUIRE(d.time_axis);
  REQUIRE(d.peak_bytes == 7u << 20);
  REQUIRE(d.peak_x == testing::kT0 + 30);
  REQUIRE(d.allocations == 3);
  REQUIRE(d.frees == 2);
  REQUIRE(d.at_peak.bytes == 7u << 20);
  REQUIRE(d.at_peak.groups.size() == 3);
  REQUIRE(d.at_peak.groups[0].site == "leaky_cache_grow(...) (cache.cpp:42)");
  REQUIRE(d.at_exit.bytes == 4u << 20);
  REQUIRE(d.at_exit.groups.size() == 1);
  REQUIRE(d.at_exit.groups[0].site == "leaky_cache_grow(...) (cache.cpp:42)");
  REQUIRE(d.at_exit.groups[0].stacks.at(0).stack == 1);
  // The leak holds the most byte-time, so it is the bottom series; PyTorch's cache (what its
  // segments reserve beyond its tensors) is a band of its own on top.
  REQUIRE(d.series.at(0) == "leaky_cache_grow(...) (cache.cpp:42)");
  REQUIRE(d.series.size() == 4);
  REQUIRE(d.cache_series);
  REQUIRE(d.series.back() == "cache");
  REQUIRE(d.ooms.size() == 1);
  REQUIRE(d.ooms[0].requested == 64u << 20);
  REQUIRE(d.bands.size() == 1);
  REQUIRE(d.bands[0].name == "step");
  REQUIRE(d.bands[0].end - d.bands[0].start == 40);
  REQUIRE(d.marks.size() == 1);
  // 1 MiB, 2 MiB and 4 MiB land in buckets 20, 21, 22.
  REQUIRE(d.sizes.size() == 3);
  REQUIRE(d.sizes[0].log2 == 20);
  REQUIRE(d.sizes[2].log2 == 22);
  // Every point's tensors add up to its total, the cache band to what is reserved beyond it, and
  // the peak is one of the points.
  bool saw_peak = false;
  for (const auto& p : d.points) {
    REQUIRE(std::accumulate(p.series.begin(), p.series.end() - 1, uint64_t{0}) == p.total);
    REQUIRE(p.series.back() == (p.reserved > p.total ? p.reserved - p.total : 0));
    saw_peak |= p.total == d.peak_bytes && p.x == d.peak_x;
  }
  REQUIRE(saw_peak);
  REQUIRE(d.points.back().total == 4u << 20);
  REQUIRE(m.stacks.size() == 3);
}

TEST_CASE("a long trace is downsampled but keeps its peak and final state") {
  auto s = testing::busy_snapshot(200000, 40);
  // One spike in the middle of device 0: it must survive downsampling exactly.
  auto& t = s.device_traces[0];
  const size_t mid = t.size() / 2;
  // Laid out as the collector writes one allocation and its free (a cumemtrace file's units are
  // its segments).
  snap::TraceEntry big{snap::Action::kAlloc, 0x1, uint64_t{1} << 40, 0, t[mid].time_us, 3, 0, 0};
  snap::TraceEntry seg = big, gone = big, seg_gone = big;
  seg.action = snap::Action::kSegmentAlloc;
  gone.action = snap::Action::kFreeCompleted;
  seg_gone.action = snap::Action::kSegmentFree;
  t.insert(t.begin() + static_cast<ptrdiff_t>(mid), {seg, big, gone, seg_gone});
  ReportOptions opt;
  opt.max_buckets = 500;
  opt.top_sites = 5;
  const auto m = build_report_model(s, opt);
  REQUIRE(m.devices.size() == 2);
  const auto& d = m.devices[0];
  REQUIRE(d.points.size() <= 2 * opt.max_buckets + 1);
  REQUIRE(d.series.size() == 6);
  REQUIRE(d.series.back() == "other");
  REQUIRE(d.peak_bytes >= uint64_t{1} << 40);
  uint64_t highest = 0;
  for (const auto& p : d.points) highest = std::max(highest, p.total);
  REQUIRE(highest == d.peak_bytes);
  REQUIRE(d.points.back().total == 0);
  REQUIRE(d.at_exit.groups.empty());
  uint64_t counted = 0;
  for (const auto& b : d.sizes) counted += b.count;
  REQUIRE(counted == d.allocations);
  for (size_t i = 1; i < d.points.size(); ++i) REQUIRE(d.points[i].x >= d.points[i - 1].x);
}

TEST_CASE("marks, bands and OOMs are capped") {
  auto s = testing::leak_snapshot();
  for (int i = 0; i < 100; ++i) {
    s.annotations.push_back({"tick", "MARK", 0, testing::kT0 + i / 2});
    s.annotations.push_back({"short", "START", 0, testing::kT0 + i / 3});
    s.annotations.push_back({"short", "END", 0, testing::kT0 + i / 3 + (i % 5)});
    snap::TraceEntry oom{snap::Action::kOom, 0, 1, 0, testing::kT0 + 59, -1, 7, 0};
    s.device_traces[0].push_back(oom);
  }
  ReportOptions opt;
  opt.max_bands = 10;
  const auto d = build_report_model(s, opt).devices.at(0);
  REQUIRE(d.bands.size() == 10);
  REQUIRE(d.marks.size() == 10);
  REQUIRE(d.bands_dropped == (101 - 10) + (101 - 10));
  // The longest bands are the ones kept: "step" (40 µs) among them.
  REQUIRE(
      std::any_of(d.bands.begin(), d.bands.end(), [](const Band& b) { return b.name == "step"; }));
  REQUIRE(d.ooms.size() == 10);
  REQUIRE(d.oom_count == 101);
}

TEST_CASE("a trace without a time span uses the event index") {
  snap::Snapshot s;
  auto& t = s.device_traces.emplace_back();
  t.push_back({snap::Action::kAlloc, 0x10, 8, 0, 0, -1, 0, 0});
  t.push_back({snap::Action::kAlloc, 0x20, 8, 0, 0, -1, 0, 0});
  s.annotations = {{"ignored", "MARK", 0, 0}};
  const auto m = build_report_model(s);
  const auto& d = m.devices.at(0);
  REQUIRE_FALSE(d.time_axis);
  REQUIRE(d.x_end == 2);
  REQUIRE(d.peak_x == 2);
  REQUIRE(d.marks.empty());
  REQUIRE(d.at_peak.groups.at(0).site == "(no stack recorded)");
  REQUIRE(d.at_exit.groups.empty());  // no segments: the file holds nothing at exit
}

TEST_CASE("a driver allocation's bytes are its site's from its segment_alloc on") {
  // busy_snapshot lays each allocation out as the collector does: a segment_alloc without a
  // stack, then the alloc with it. The chart's series are device 0's two sites, never "no stack".
  const auto m = build_report_model(testing::busy_snapshot(40, 4));  // device 0: sites 0 and 2
  const auto& d = m.devices.at(0);
  REQUIRE(d.series.size() == 2);
  REQUIRE(std::find(d.series.begin(), d.series.end(), std::string("(no stack recorded)")) ==
          d.series.end());
  for (const auto& p : d.points) {
    REQUIRE(std::accumulate(p.series.begin(), p.series.end(), uint64_t{0}) == p.total);
  }
}

TEST_CASE("automatic phases stay apart from the user's marks and bounded on a 10,000-step run") {
  snap::Snapshot s;
  s.stacks = {{{"/w/train.py", 5, "step"}}};
  auto& tr = s.device_traces.emplace_back();
  const int64_t t0 = 1'000'000;
  // One tensor a step, 100 us per step: forward 40 us, backward 40, optimizer 20.
  for (int64_t i = 0; i < 10'000; ++i) {
    const int64_t t = t0 + i * 100;
    snap::TraceEntry e;
    e.action = snap::Action::kAlloc, e.addr = 0x1000, e.size = 4096, e.time_us = t + 1;
    e.stack = 0, e.category = snap::Category::kActivation;
    tr.push_back(e);
    e.action = snap::Action::kFreeCompleted, e.time_us = t + 60;
    tr.push_back(e);
    s.annotations.push_back({"auto:forward", "START", 0, t});
    s.annotations.push_back({"auto:forward", "END", 0, t + 40});
    s.annotations.push_back({"auto:backward", "START", 0, t + 40});
    s.annotations.push_back({"auto:backward", "END", 0, t + 80});
    s.annotations.push_back({"auto:optimizer", "START", 0, t + 80});
    s.annotations.push_back({"auto:optimizer", "END", 0, t + 100});
    s.annotations.push_back({"auto:step", "MARK", 0, t + 100});
  }
  s.annotations.push_back({"warmup", "START", 0, t0});
  s.annotations.push_back({"warmup", "END", 0, t0 + 200});
  s.annotations.push_back({"checkpoint", "MARK", 0, t0 + 500'000});
  ReportOptions opt;
  opt.max_buckets = 500;
  opt.max_bands = 100;
  const auto m = build_report_model(s, opt);
  REQUIRE(m.devices.size() == 1);
  const auto& d = m.devices[0];
  // The user's band and mark are all the bands and marks there are: none crowded out.
  REQUIRE(d.bands.size() == 1);
  REQUIRE(d.bands[0].name == "warmup");
  REQUIRE(d.marks.size() == 1);
  REQUIRE(d.marks[0].name == "checkpoint");
  REQUIRE(d.bands_dropped == 0);
  // 30,000 phases drawn as 500 buckets of 20 steps each: forward, backward and optimizer side by
  // side in each, as wide as their shares (40, 40 and 20 us of every 100).
  REQUIRE(d.phase_count == 30'000);
  REQUIRE(d.phases.size() == 3 * opt.max_buckets);
  // A bucket's edges cut at most one phase at each end (40 us), and the widths add up to the
  // phases' own time (each rectangle's ends rounded down to the microsecond).
  int64_t sum[3] = {0, 0, 0};
  for (size_t i = 0; i < d.phases.size(); ++i) {
    const auto& p = d.phases[i];
    REQUIRE(p.name == std::vector<std::string>{"forward", "backward", "optimizer"}[i % 3]);
    const int64_t w = p.end - p.start;
    REQUIRE(std::abs(w - (i % 3 == 2 ? 400 : 800)) <= 80);
    sum[i % 3] += w;
  }
  // The x axis starts at the first entry (t0 + 1) and ends at the last (the last step's free at
  // +60): forward loses 1 us at the start, backward 20 and the optimizer 20 at the end.
  REQUIRE(std::abs(sum[0] - (400'000 - 1)) <= 500);
  REQUIRE(std::abs(sum[1] - (400'000 - 20)) <= 500);
  REQUIRE(std::abs(sum[2] - (200'000 - 20)) <= 500);
  // 10,000 step boundaries thinned evenly to max_bands, numbered as they were.
  REQUIRE(d.step_count == 10'000);
  REQUIRE(d.steps.size() == 100);
  REQUIRE(d.steps[0].step == 1);
  REQUIRE(d.steps[1].step == 101);
  REQUIRE(d.steps.back().step == 9'901);
  // By category: a single series, the activation.
  REQUIRE(d.by_category);
  REQUIRE(d.series == std::vector<std::string>{"activation"});

  // Fewer phases than buckets: each is drawn as the analysis cuts it (phases.h: an END's
  // microsecond is inside its interval, so the backward that STARTs there begins one later).
  opt.max_buckets = 40'000;
  const auto exact = build_report_model(s, opt).devices.at(0);
  REQUIRE(exact.phases.size() == 30'000);
  REQUIRE(exact.phases[1].name == "backward");
  REQUIRE(exact.phases[1].start == t0 + 41);
  REQUIRE(exact.phases[1].end == t0 + 81);
}
