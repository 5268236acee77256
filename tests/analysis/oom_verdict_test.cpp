// The OOM verdict (analysis/oom_verdict.h) on snapshots built by hand with exact bytes: PyTorch's
// fragmentation and exhaustion (the two runs: 960 MiB cached free under a 200 MiB request,
// and a 26 MiB request with 25 MiB cached free whose largest block is 21 MiB), a memory fraction,
// a driver OOM without PyTorch, PyTorch's own retry path, and how `report` shows them.
#include <catch2/catch.hpp>

#include <sstream>

#include <nlohmann/json.hpp>

#include "analysis/frames.h"
#include "analysis/oom_verdict.h"
#include "analysis/report.h"
#include "support/snapshot_builder.h"

using namespace cumemtrace;
using namespace cumemtrace::analysis;

namespace {

constexpr uint64_t MiB = 1 << 20;

struct Seg {
  uint64_t addr, size, tensor;  // one live tensor of `tensor` bytes at the segment's start
};

snap::TraceEntry entry(snap::Action a, uint64_t addr, uint64_t size, int64_t t,
                       int32_t stack = snap::kNoStack) {
  snap::TraceEntry e;
  e.action = a;
  e.addr = addr;
  e.size = size;
  e.time_us = t;
  e.stack = stack;
  e.tid = 7;
  e.source = snap::Source::kPytorch;
  return e;
}

// A cumemtrace OOM snapshot of a PyTorch run: the segments, one tensor in each, then PyTorch's
// `oom` entry. With `free_after`, the first tensor is freed after the OOM (the snapshot's
// segments then no longer show the OOM's moment: the free blocks are reconstructed).
snap::Snapshot torch_oom(const std::vector<Seg>& segs, uint64_t request, uint64_t device_free,
                         bool expandable, bool free_after = false) {
  snap::Snapshot s;
  s.stacks = {{{"train.py", 41, "forward"}, {"train.py", 90, "<module>"}},
              {{"train.py", 57, "attention"}, {"train.py", 90, "<module>"}}};
  auto& tr = s.device_traces.emplace_back();
  int64_t t = 2'000'000;
  for (const auto& g : segs) {
    tr.push_back(entry(snap::Action::kSegmentAlloc, g.addr, g.size, t += 10));
    tr.push_back(entry(snap::Action::kAlloc, g.addr, g.tensor, t += 10, 0));
  }
  snap::TraceEntry oom = entry(snap::Action::kOom, 0, request, t += 10, 1);
  oom.device_free = device_free;
  tr.push_back(oom);
  if (free_after) {
    tr.push_back(entry(snap::Action::kFreeRequested, segs[0].addr, segs[0].tensor, t += 10));
    tr.push_back(entry(snap::Action::kFreeCompleted, segs[0].addr, segs[0].tensor, t += 10));
  }
  for (size_t i = 0; i < segs.size(); ++i) {
    const auto& g = segs[i];
    snap::Segment seg;
    seg.source = snap::Source::kPytorch;
    seg.address = g.addr;
    seg.total_size = g.size;
    seg.segment_type = "large";
    if (free_after && i == 0) {
      seg.blocks.push_back({g.addr, g.size, 0, "inactive", snap::kNoStack});
    } else {
      seg.blocks.push_back({g.addr, g.tensor, g.tensor, "active_allocated", 0});
      seg.blocks.push_back({g.addr + g.tensor, g.size - g.tensor, 0, "inactive", snap::kNoStack});
    }
    s.segments.push_back(seg);
  }
  snap::ToolSection tool;
  tool.pid = 4242;
  tool.exe = "/usr/bin/python3";
  tool.argv = {"python3", "train.py"};
  tool.start_time_us = 1'000'000;
  tool.end_time_us = t;
  tool.reason = "oom";
  snap::PytorchInfo py;
  py.version = "2.11.0";
  py.backend = "native";
  py.capture = "blocks";
  py.expandable_segments = expandable;
  tool.pytorch = py;
  s.tool = tool;
  return s;
}

// The first run: 200 MiB asked, 960 MiB free in the cache in 20 MiB pieces, the device
// full. 48 segments of 40 MiB, each half taken by a 20 MiB tensor.
snap::Snapshot fragmented(bool free_after = false, bool expandable = false) {
  std::vector<Seg> segs;
  for (uint64_t i = 0; i < 48; ++i)
    segs.push_back({0x7f0000000000 + i * 64 * MiB, 40 * MiB, 20 * MiB});
  return torch_oom(segs, 200 * MiB, 0, expandable, free_after);
}

// The second run: 26 MiB asked; 25 MiB free in the cache, the largest block 21 MiB.
snap::Snapshot exhausted(uint64_t device_free = 0) {
  return torch_oom({{0x7f0000000000, 40 * MiB, 19 * MiB}, {0x7f0010000000, 20 * MiB, 16 * MiB}},
                   26 * MiB, device_free, false);
}

std::vector<OomVerdict> verdicts(const snap::Snapshot& s) {
  const SiteTable sites(s);
  return oom_verdicts(s, sites);
}

}  // namespace

TEST_CASE("fragmentation: the cache has room, no free block holds the request", "[oom]") {
  for (const bool free_after : {false, true}) {
    CAPTURE(free_after);
    const auto v = verdicts(fragmented(free_after));
    REQUIRE(v.size() == 1);
    CHECK(v[0].verdict == "fragmentation");
    CHECK(v[0].pytorch);
    CHECK(v[0].requested == 200 * MiB);
    CHECK(v[0].device_free == 0);
    CHECK(v[0].reserved == 1920 * MiB);
    CHECK(v[0].allocated == 960 * MiB);
    CHECK(v[0].cached_free == 960 * MiB);
    // Exact from the snapshot's segments when nothing changed after the OOM; the same numbers
    // reconstructed from the trace when the first tensor was freed after it.
    CHECK(v[0].blocks_exact == !free_after);
    CHECK(v[0].largest_free == 20 * MiB);
    CHECK(v[0].unreleasable == 960 * MiB);
    CHECK(v[0].releasable == 0);
    CHECK(v[0].compacted_free == 960 * MiB);
    CHECK(v[0].shortfall == 0);
    CHECK_FALSE(v[0].budget_below_device);
    CHECK(v[0].budget == 1920 * MiB);  // held (tracked: the segments) + 0 free on the device
    CHECK(v[0].stack == 1);
    REQUIRE(v[0].advice.size() == 2);
    CHECK(v[0].advice[0] ==
          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: 960 MiB was free in the cache but no "
          "free block (the largest 20 MiB) holds 200 MiB; an expandable segment grows in place "
          "instead");
    CHECK(v[0].advice[1] ==
          "torch.cuda.empty_cache() cannot help: all 960 MiB free in the cache lies in segments "
          "that hold live tensors");
    CHECK(oom_verdict_line(v[0]) ==
          "fragmentation: 200 MiB requested, 960 MiB free even compacted (cached free 960 MiB + "
          "device free 0 B), largest free block 20 MiB");
  }
}

TEST_CASE("fragmentation with expandable segments on: no advice to turn them on", "[oom]") {
  const auto v = verdicts(fragmented(false, true));
  REQUIRE(v.size() == 1);
  CHECK(v[0].verdict == "fragmentation");
  REQUIRE(v[0].advice.size() == 1);
  CHECK(v[0].advice[0].rfind("torch.cuda.empty_cache() cannot help", 0) == 0);
}

TEST_CASE("exhaustion: 26 MiB asked, 25 MiB free in the cache, largest block 21 MiB", "[oom]") {
  const auto v = verdicts(exhausted());
  REQUIRE(v.size() == 1);
  // The largest block (21 MiB) is too small too, but even compacted the free bytes are fewer
  // than the request: not fragmentation.
  CHECK(v[0].verdict == "exhaustion");
  CHECK(v[0].cached_free == 25 * MiB);
  CHECK(v[0].largest_free == 21 * MiB);
  CHECK(v[0].compacted_free == 25 * MiB);
  CHECK(v[0].shortfall == 1 * MiB);
  CHECK(v[0].reserved == 60 * MiB);
  CHECK(v[0].allocated == 35 * MiB);
  REQUIRE(v[0].advice.size() == 2);
  CHECK(v[0].advice[0] ==
        "at least 1 MiB more would have had to be free: what is live must shrink by that much "
        "(35 MiB held by live tensors)");
  CHECK(v[0].advice[1] ==
        "torch.cuda.empty_cache() cannot help: all 25 MiB free in the cache lies in segments that "
        "hold live tensors");
  // One more MiB free on the device makes it fit once compacted: fragmentation.
  const auto w = verdicts(exhausted(1 * MiB));
  REQUIRE(w.size() == 1);
  CHECK(w[0].verdict == "fragmentation");
  CHECK(w[0].compacted_free == 26 * MiB);
}

TEST_CASE("a memory fraction: PyTorch refused although the device had room", "[oom]") {
  // 1 GiB free on the device, more than the 26 MiB segment PyTorch would have asked for: a
  // budget below the device (set_per_process_memory_fraction) refused it.
  const auto v = verdicts(exhausted(1024 * MiB));
  REQUIRE(v.size() == 1);
  CHECK(v[0].budget_below_device);
  CHECK(v[0].budget == 60 * MiB);
  CHECK(v[0].headroom == 0);
  CHECK(v[0].verdict == "exhaustion");
  CHECK(v[0].shortfall == 1 * MiB);
  CHECK(oom_verdict_line(v[0]) ==
        "exhaustion: 26 MiB requested, 25 MiB free even compacted (cached free 25 MiB + no "
        "headroom under a budget below the device), largest free block 21 MiB");
  REQUIRE_FALSE(v[0].advice.empty());
  CHECK(v[0].advice[0] ==
        "up to 1 MiB more would have had to be free (less the budget's headroom above the reserved "
        "bytes, which is not recorded): what is live must shrink by that much (35 MiB held by live "
        "tensors)");
}

TEST_CASE("a driver OOM without PyTorch: the device's free bytes against the request", "[oom]") {
  testing::SnapshotBuilder b;
  const auto w = b.site("load_weights", "model.cpp", 88);
  b.alloc(0x10000000, 3 * MiB, w);
  snap::Snapshot s = b.finish();
  snap::TraceEntry oom;
  oom.action = snap::Action::kOom;
  oom.size = 4 * MiB;
  oom.device_free = 1 * MiB;
  oom.time_us = s.tool->end_time_us + 10;
  oom.stack = w;
  s.device_traces[0].push_back(oom);
  auto v = verdicts(s);
  REQUIRE(v.size() == 1);
  CHECK_FALSE(v[0].pytorch);
  CHECK_FALSE(v[0].has_cache);
  CHECK_FALSE(v[0].largest_free.has_value());
  CHECK(v[0].verdict == "exhaustion");
  CHECK(v[0].budget == 4 * MiB);  // 3 MiB held + 1 MiB free
  CHECK(v[0].compacted_free == 1 * MiB);
  CHECK(v[0].shortfall == 3 * MiB);
  CHECK(v[0].other_libraries == 3 * MiB);
  REQUIRE(v[0].advice.size() == 1);
  CHECK(v[0].advice[0] ==
        "at least 3 MiB more would have had to be free: what is live must shrink by that much");
  // 5 MiB free but the driver still refused 4 MiB: fragmented (or limited) device memory.
  s.device_traces[0].back().device_free = 5 * MiB;
  v = verdicts(s);
  REQUIRE(v.size() == 1);
  CHECK(v[0].verdict == "fragmentation");
  CHECK(v[0].advice.empty());
}

TEST_CASE("PyTorch's failed cudaMalloc before its own OOM is the same OOM", "[oom]") {
  snap::Snapshot s = exhausted();
  auto& tr = s.device_traces[0];
  // The driver OOM (cumemtrace's, source driver) just before PyTorch's oom entry.
  snap::TraceEntry drv;
  drv.action = snap::Action::kOom;
  drv.size = 26 * MiB;
  drv.time_us = tr.back().time_us - 5;
  tr.insert(tr.end() - 1, drv);
  const auto v = verdicts(s);
  REQUIRE(v.size() == 1);
  CHECK(v[0].pytorch);
  CHECK(v[0].index == tr.size() - 1);
}

TEST_CASE("report: the OOM first, its json, and 'at this snapshot' for an OOM snapshot", "[oom]") {
  const snap::Snapshot s = fragmented();
  const SiteTable sites(s);
  const Report r = build_report(s, sites, "train.4242.oom.json");
  std::ostringstream text;
  print_report_text(r, s, sites, ReportOptions{}, text);
  const std::string t = text.str();
  const std::string expected_head =
      "cumemtrace report: train.4242.oom.json (cumemtrace snapshot)\n"
      "  program: python3 train.py (pid 4242), ended: running, snapshot written on oom\n"
      "  events: 0 recorded, 0 dropped\n"
      "  trace entries: 97\n"
      "\n"
      "OOM 1 on device 0 at +1.000970 s: fragmentation\n"
      "  fragmentation: 200 MiB requested, 960 MiB free even compacted (cached free 960 MiB + "
      "device free 0 B), largest free block 20 MiB\n"
      "  PyTorch's caching allocator could not get 200 MiB; the device had 0 B free\n"
      "  budget: 1.88 GiB (held on the device + its free bytes)\n"
      "  PyTorch reserved 1.88 GiB = allocated 960 MiB + cached 960 MiB free, largest free block "
      "20 MiB (from the snapshot's segments)\n"
      "  free in segments holding live tensors: 960 MiB; in empty segments (releasable): 0 B\n"
      "  advice: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: 960 MiB was free in the cache "
      "but no free block (the largest 20 MiB) holds 200 MiB; an expandable segment grows in place "
      "instead\n"
      "  advice: torch.cuda.empty_cache() cannot help: all 960 MiB free in the cache lies in "
      "segments that hold live tensors\n"
      "  the failing request:\n"
      "        at attention (train.py:57)\n";
  CHECK(t.substr(0, expected_head.size()) == expected_head);
  CHECK(t.find("live at this snapshot: ") != std::string::npos);
  CHECK(t.find("memory layers at this snapshot (") != std::string::npos);
  CHECK(t.find("at exit") == std::string::npos);

  std::ostringstream js;
  print_report_json(r, s, sites, ReportOptions{}, js);
  const auto j = nlohmann::json::parse(js.str());
  REQUIRE(j["ooms"].size() == 1);
  const auto& o = j["ooms"][0];
  CHECK(o["verdict"] == "fragmentation");
  CHECK(o["requested_bytes"] == 200 * MiB);
  CHECK(o["cached_free_bytes"] == 960 * MiB);
  CHECK(o["largest_free_bytes"] == 20 * MiB);
  CHECK(o["budget_bytes"] == 1920 * MiB);
  CHECK(o["source"] == "pytorch");
  CHECK(o["site"] == "attention (train.py:57)");
}
