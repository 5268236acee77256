// The OOM verdict (pytorch/oom_verdict.h) on snapshots built by hand with exact bytes: PyTorch's
// fragmentation and exhaustion (the issue's two runs: 960 MiB cached free under a 200 MiB request,
// and a 26 MiB request with 25 MiB cached free whose largest block is 21 MiB), a memory fraction,
// a driver OOM without PyTorch, PyTorch's own retry path, and how `report` shows them.
#include <catch2/catch.hpp>

#include <sstream>

#include <nlohmann/json.hpp>

#include "analysis/frames.h"
#include "pytorch/categories.h"
#include "pytorch/oom_verdict.h"
#include "support/snapshot_builder.h"
#include "support/torch_oom_snapshot.h"
#include "verdicts/report.h"

using namespace cumemtrace;
using namespace cumemtrace::analysis;

namespace {

constexpr uint64_t MiB = 1 << 20;
constexpr int64_t iMiB = 1 << 20;

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

// The issue's first run: 200 MiB asked, 960 MiB free in the cache in 20 MiB pieces, the device
// full. 48 segments of 40 MiB, each half taken by a 20 MiB tensor.
snap::Snapshot fragmented(bool free_after = false, bool expandable = false) {
  std::vector<Seg> segs;
  for (uint64_t i = 0; i < 48; ++i)
    segs.push_back({0x7f0000000000 + i * 64 * MiB, 40 * MiB, 20 * MiB});
  return torch_oom(segs, 200 * MiB, 0, expandable, free_after);
}

// The issue's second run: 26 MiB asked; 25 MiB free in the cache, the largest block 21 MiB.
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
    // The replay cannot reproduce these 40 MiB segments (PyTorch would have made 20 MiB ones for
    // a 20 MiB tensor): it refuses, and the verdict says nothing of it.
    CHECK_FALSE(v[0].whatif);
    REQUIRE(v[0].advice.size() == 2);
    CHECK(v[0].advice[0] ==
          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: 960 MiB was free in the cache but no "
          "free block (the largest 20.0 MiB) holds 200 MiB; an expandable segment grows in place "
          "instead");
    CHECK(v[0].advice[1] ==
          "torch.cuda.empty_cache() cannot help: all 960 MiB free in the cache lies in segments "
          "that hold live tensors");
    CHECK(oom_verdict_line(v[0]) ==
          "fragmentation: 200 MiB requested, 960 MiB free even compacted (cached free 960 MiB + "
          "device free 0 B), largest free block 20.0 MiB");
  }
}

TEST_CASE("fragmentation with expandable segments on: no advice to turn them on", "[oom]") {
  const auto v = verdicts(fragmented(false, true));
  REQUIRE(v.size() == 1);
  CHECK(v[0].verdict == "fragmentation");
  REQUIRE(v[0].advice.size() == 1);
  CHECK(v[0].advice[0].rfind("torch.cuda.empty_cache() cannot help", 0) == 0);
}

TEST_CASE("exhaustion: 26.0 MiB asked, 25.0 MiB free in the cache, largest block 21.0 MiB",
          "[oom]") {
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
  // Who holds it: both tensors at one line; the run has no categories (no phases, no walks).
  CHECK_FALSE(v[0].categorized);
  CHECK_FALSE(v[0].phased);
  REQUIRE(v[0].held.by_site.size() == 1);
  CHECK(v[0].held.by_site[0].site == "forward (train.py:41)");
  CHECK(v[0].held.by_site[0].bytes == 35 * iMiB);
  CHECK(v[0].held.by_site[0].count == 2);
  CHECK_FALSE(v[0].whatif);  // exhaustion: no replay asked
  REQUIRE(v[0].advice.size() == 3);
  CHECK(v[0].advice[0] ==
        "at least 1.00 MiB more would have had to be free: what is live must shrink by that much "
        "(35.0 MiB held by live tensors)");
  CHECK(v[0].advice[1] ==
        "what holds it, largest first (to shrink by at least 1.00 MiB): 35.0 MiB at forward "
        "(train.py:41)");
  CHECK(
      v[0].advice[2] ==
      "torch.cuda.empty_cache() cannot help: all 25.0 MiB free in the cache lies in segments that "
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
        "exhaustion: 26.0 MiB requested, 25.0 MiB free even compacted (cached free 25.0 MiB + no "
        "headroom under a budget below the device), largest free block 21.0 MiB");
  REQUIRE_FALSE(v[0].advice.empty());
  CHECK(
      v[0].advice[0] ==
      "up to 1.00 MiB more would have had to be free (less the budget's headroom above the "
      "reserved "
      "bytes, which is not recorded): what is live must shrink by that much (35.0 MiB held by live "
      "tensors)");
  REQUIRE(v[0].advice.size() == 3);
  CHECK(v[0].advice[1] ==
        "what holds it, largest first (to shrink by up to 1.00 MiB): 35.0 MiB at forward "
        "(train.py:41)");
}

TEST_CASE("a recorded memory fraction: the budget as the user set it", "[oom]") {
  // 1 GiB free on the device; the capture recorded set_per_process_memory_fraction(0.0625) on a
  // 1,120 MiB device: PyTorch may reserve 70 MiB. 60 MiB reserved + the 26 MiB segment > 70 MiB.
  auto s = exhausted(1024 * MiB);
  s.tool->pytorch->memory_fractions.push_back({1'500'000, 0, "0.0625", 70 * MiB, 1120 * MiB});
  const auto v = verdicts(s);
  REQUIRE(v.size() == 1);
  CHECK(v[0].budget_below_device);
  REQUIRE(v[0].fraction);
  CHECK(v[0].budget == 70 * MiB);
  CHECK(v[0].headroom == 10 * MiB);
  // 25 MiB cached free + 10 MiB under the budget hold 26 MiB once compacted.
  CHECK(v[0].verdict == "fragmentation");
  CHECK(oom_verdict_line(v[0]) ==
        "fragmentation: 26.0 MiB requested, 35.0 MiB free even compacted (cached free 25.0 MiB + "
        "headroom 10.0 MiB under the 70.0 MiB allowed by the memory fraction 0.0625 of 1.09 GiB), "
        "largest free block 21.0 MiB");
  const auto facts = oom_facts(v[0]);
  REQUIRE(facts.size() >= 2);
  CHECK(facts[1] ==
        "budget: 70.0 MiB allowed by the memory fraction 0.0625 of 1.09 GiB: PyTorch refused with "
        "60.0 MiB reserved, 10.0 MiB left under it");
  // Facts that add up: allocated + free blocks = reserved.
  CHECK(v[0].allocated + v[0].cached_free == v[0].reserved);
  CHECK(v[0].cached_free == v[0].releasable + v[0].unreleasable);
  // A fraction set after the OOM is not the one in force.
  auto later = exhausted(1024 * MiB);
  later.tool->pytorch->memory_fractions.push_back({9'000'000, 0, "0.0625", 70 * MiB, 1120 * MiB});
  const auto w = verdicts(later);
  REQUIRE(w.size() == 1);
  CHECK_FALSE(w[0].fraction);
  CHECK(w[0].budget == 60 * MiB);
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
  // Who holds it: the program's own allocations by site (no PyTorch tensors on the device).
  REQUIRE(v[0].held.by_site.size() == 1);
  CHECK(v[0].held.by_site[0].site == "load_weights (model.cpp:88)");
  CHECK(v[0].held.by_site[0].bytes == 3 * iMiB);
  CHECK(v[0].held.by_site[0].category == snap::Category::kLibrary);
  REQUIRE(v[0].advice.size() == 2);
  CHECK(v[0].advice[0] ==
        "at least 3.00 MiB more would have had to be free: what is live must shrink by that much");
  CHECK(v[0].advice[1] ==
        "what holds it, largest first (to shrink by at least 3.00 MiB): 3.00 MiB at load_weights "
        "(model.cpp:88)");
  // 5 MiB asked with 1 MiB free: 4 MiB short, more than the 3 MiB everything live holds.
  s.device_traces[0].back().size = 5 * MiB;
  v = verdicts(s);
  REQUIRE(v.size() == 1);
  CHECK(v[0].shortfall == 4 * MiB);
  REQUIRE(v[0].advice.size() == 3);
  CHECK(v[0].advice[2] ==
        "freeing everything live (3.00 MiB) would not have been enough: 5.00 MiB needs a larger "
        "budget "
        "or a smaller request");
  s.device_traces[0].back().size = 4 * MiB;
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
      "device free 0 B), largest free block 20.0 MiB\n"
      "  PyTorch's caching allocator could not get 200 MiB; the device had 0 B free\n"
      "  budget: 1.88 GiB (held on the device + its free bytes)\n"
      "  PyTorch reserved 1.88 GiB = allocated 960 MiB + cached 960 MiB free, largest free block "
      "20.0 MiB (from the snapshot's segments)\n"
      "  free in segments holding live tensors: 960 MiB; in empty segments (releasable): 0 B\n"
      "  held by line:\n"
      "             960 MiB  forward (train.py:41)\n"
      "  advice: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: 960 MiB was free in the cache "
      "but no free block (the largest 20.0 MiB) holds 200 MiB; an expandable segment grows in "
      "place "
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

namespace {

// whatif_test's fragmentation OOM as the collector writes it (a cumemtrace snapshot, PyTorch's
// entries merged, expandable segments off): nine 6 MiB tensors, three per 20 MiB segment, six
// freed so that each segment keeps one; then 15 MiB, which no free block holds (the largest 14 MiB)
// and whose 16 MiB segment does not fit the 4 MiB the device has free. 42 MiB cached free: a
// fragmentation OOM, and one the model of PyTorch's allocator reproduces segment for segment.
// `request` other than 15 MiB: the same state asked for that much.
snap::Snapshot replayable_fragmentation(uint64_t request = 15 * MiB) {
  snap::Snapshot s = torch_oom({}, 0, 0, false);
  auto& tr = s.device_traces[0];
  tr.clear();
  s.segments.clear();
  int64_t t = 2'000'000;
  const uint64_t S[3] = {0x7f0000000000, 0x7f0002000000, 0x7f0004000000};
  const uint64_t sz = 6 * MiB;
  for (int g = 0; g < 3; ++g) {
    tr.push_back(entry(snap::Action::kSegmentAlloc, S[g], 20 * MiB, t += 10));
    for (uint64_t j = 0; j < 3; ++j)
      tr.push_back(entry(snap::Action::kAlloc, S[g] + j * sz, sz, t += 10, 0));
  }
  for (const uint64_t a : {S[0] + sz, S[0] + 2 * sz, S[1], S[1] + 2 * sz, S[2], S[2] + sz}) {
    tr.push_back(entry(snap::Action::kFreeRequested, a, sz, t += 10));
    tr.push_back(entry(snap::Action::kFreeCompleted, a, sz, t += 10));
  }
  snap::TraceEntry oom = entry(snap::Action::kOom, 0, request, t += 10, 1);
  oom.device_free = 4 * MiB;
  tr.push_back(oom);
  // The segments at the OOM: the kept tensor of each (first, middle, last) and its free pieces.
  const uint64_t kept[3] = {S[0], S[1] + sz, S[2] + 2 * sz};
  for (int g = 0; g < 3; ++g) {
    snap::Segment seg;
    seg.source = snap::Source::kPytorch;
    seg.address = S[g];
    seg.total_size = 20 * MiB;
    seg.segment_type = "large";
    if (kept[g] > S[g]) seg.blocks.push_back({S[g], kept[g] - S[g], 0, "inactive", snap::kNoStack});
    seg.blocks.push_back({kept[g], sz, sz, "active_allocated", 0});
    if (kept[g] + sz < S[g] + 20 * MiB)
      seg.blocks.push_back(
          {kept[g] + sz, S[g] + 20 * MiB - kept[g] - sz, 0, "inactive", snap::kNoStack});
    s.segments.push_back(seg);
  }
  s.tool->end_time_us = t;
  return s;
}

}  // namespace

TEST_CASE("fragmentation: the replay says expandable segments would have served it", "[oom]") {
  const snap::Snapshot s = replayable_fragmentation();
  const auto v = verdicts(s);
  REQUIRE(v.size() == 1);
  CHECK(v[0].verdict == "fragmentation");
  CHECK(v[0].reserved == 60 * MiB);
  CHECK(v[0].allocated == 18 * MiB);
  CHECK(v[0].cached_free == 42 * MiB);
  CHECK(v[0].largest_free == 14 * MiB);  // the first segment: its tensor at the start
  CHECK(v[0].compacted_free == 46 * MiB);
  REQUIRE(v[0].whatif);
  CHECK(v[0].whatif->alloc_conf == "expandable_segments:True");
  CHECK(v[0].whatif->would_succeed);
  CHECK(v[0].whatif->reserved.bytes == 60 * MiB);
  CHECK(v[0].whatif->recorded_reserved.bytes == 60 * MiB);
  REQUIRE(v[0].advice.size() == 3);
  CHECK(v[0].advice[0] ==
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: 42.0 MiB was free in the cache but no "
        "free block (the largest 14.0 MiB) holds 15.0 MiB; an expandable segment grows in place "
        "instead");
  CHECK(v[0].advice[1] ==
        "under expandable_segments:True this request would have succeeded (the same reserved "
        "peak, 60.0 MiB; replayed from this trace)");
  CHECK(
      v[0].advice[2] ==
      "torch.cuda.empty_cache() cannot help: all 42.0 MiB free in the cache lies in segments that "
      "hold live tensors");

  const SiteTable sites(s);
  const Report r = build_report(s, sites, "train.4242.oom.json");
  std::ostringstream js;
  print_report_json(r, s, sites, ReportOptions{}, js);
  const auto j = nlohmann::json::parse(js.str());
  REQUIRE(j["ooms"].size() == 1);
  const auto& w = j["ooms"][0]["whatif"];
  CHECK(w["alloc_conf"] == "expandable_segments:True");
  CHECK(w["would_succeed"] == true);
  CHECK(w["reserved_peak_bytes"] == 60 * MiB);
  CHECK(w["recorded_reserved_peak_bytes"] == 60 * MiB);
  // By site alone: the run has no categories.
  CHECK(j["ooms"][0]["held_by_category"].is_null());
  CHECK(j["ooms"][0]["held_at"].is_null());
  const nlohmann::json by_site = nlohmann::json::array({{{"site", "forward (train.py:41)"},
                                                         {"category", "unknown"},
                                                         {"bytes", 18 * MiB},
                                                         {"count", 3}}});
  CHECK(j["ooms"][0]["held_by_site"] == by_site);

  // Expandable segments already on: no replay, no advice to turn them on.
  snap::Snapshot on = s;
  on.tool->pytorch->expandable_segments = true;
  const auto v_on = verdicts(on);
  REQUIRE(v_on.size() == 1);
  CHECK_FALSE(v_on[0].whatif);
  REQUIRE(v_on[0].advice.size() == 1);
  CHECK(v_on[0].advice[0].rfind("torch.cuda.empty_cache() cannot help", 0) == 0);
}

TEST_CASE("fragmentation the replay says expandable segments would not have served", "[oom]") {
  // 30 MiB: 46 MiB free even compacted (fragmentation), but the model of PyTorch's allocator,
  // replayed under expandable segments within the recorded 64 MiB budget (60 reserved + 4 free on
  // the device), fails this same request too.
  const snap::Snapshot s = replayable_fragmentation(30 * MiB);
  const auto v = verdicts(s);
  REQUIRE(v.size() == 1);
  CHECK(v[0].verdict == "fragmentation");
  CHECK(v[0].compacted_free == 46 * MiB);
  REQUIRE(v[0].whatif);
  CHECK_FALSE(v[0].whatif->would_succeed);
  REQUIRE(v[0].whatif->first_failing_request);
  CHECK(v[0].whatif->first_failing_request->entry == v[0].index);
  // No advice to turn expandable segments on: the replay says they would not have helped.
  REQUIRE(v[0].advice.size() == 2);
  CHECK(v[0].advice[0] ==
        "under expandable_segments:True this request would not have succeeded either (the same "
        "reserved peak, 60.0 MiB; replayed from this trace)");
  CHECK(v[0].advice[1].rfind("torch.cuda.empty_cache() cannot help", 0) == 0);
  const SiteTable sites(s);
  std::ostringstream js;
  print_report_json(build_report(s, sites, "f.json"), s, sites, ReportOptions{}, js);
  const auto j = nlohmann::json::parse(js.str());
  CHECK(j["ooms"][0]["whatif"]["would_succeed"] == false);
}

TEST_CASE("exhaustion in a training step: who holds it by category and line", "[oom]") {
  snap::Snapshot s = testing::training_oom_snapshot();
  label_categories(s);
  const auto v = verdicts(s);
  REQUIRE(v.size() == 1);
  CHECK(v[0].verdict == "exhaustion");
  CHECK(v[0].reserved == 64 * MiB);
  CHECK(v[0].allocated == 54 * MiB);
  CHECK(v[0].cached_free == 10 * MiB);
  CHECK(v[0].shortfall == 6 * MiB);
  CHECK(v[0].categorized);
  CHECK(v[0].phased);
  CHECK(v[0].held.step == 1);
  CHECK(v[0].held.phase == Phase::kForward);
  REQUIRE(v[0].held.by_category.size() == 2);
  CHECK(v[0].held.by_category[0].category == snap::Category::kActivation);
  CHECK(v[0].held.by_category[0].bytes == 30 * iMiB);
  CHECK(v[0].held.by_category[1].category == snap::Category::kParameter);
  CHECK(v[0].held.by_category[1].bytes == 24 * iMiB);
  REQUIRE(v[0].advice.size() == 3);
  CHECK(v[0].advice[1] ==
        "what holds it, largest first (to shrink by at least 6.00 MiB): activation 30.0 MiB at "
        "forward (model.py:40); parameter 24.0 MiB at <module> (train.py:5)");

  const SiteTable sites(s);
  const Report r = build_report(s, sites, "train.4321.oom.json");
  std::ostringstream text;
  print_report_text(r, s, sites, ReportOptions{}, text);
  const std::string t = text.str();
  // Between the facts and the advice.
  const std::string expected =
      "  PyTorch reserved 64.0 MiB = allocated 54.0 MiB + cached 10.0 MiB free, largest free block "
      "10.0 "
      "MiB (from the snapshot's segments)\n"
      "  free in segments holding live tensors: 10.0 MiB; in empty segments (releasable): 0 B\n"
      "  held by category (step 2, forward): activation 30.0 MiB, parameter 24.0 MiB\n"
      "  held by line:\n"
      "            30.0 MiB  forward (model.py:40) (activation)\n"
      "            24.0 MiB  <module> (train.py:5) (parameter)\n"
      "  advice: at least 6.00 MiB more would have had to be free: what is live must shrink by "
      "that "
      "much (54.0 MiB held by live tensors)\n"
      "  advice: what holds it, largest first (to shrink by at least 6.00 MiB): activation 30.0 "
      "MiB at "
      "forward (model.py:40); parameter 24.0 MiB at <module> (train.py:5)\n"
      "  advice: torch.cuda.empty_cache() cannot help: all 10.0 MiB free in the cache lies in "
      "segments that hold live tensors\n"
      "  the failing request:\n"
      "        at forward (model.py:44)\n";
  INFO(t);
  CHECK(t.find(expected) != std::string::npos);

  std::ostringstream js;
  print_report_json(r, s, sites, ReportOptions{}, js);
  const auto j = nlohmann::json::parse(js.str());
  REQUIRE(j["ooms"].size() == 1);
  const auto& o = j["ooms"][0];
  CHECK(o["held_by_category"] ==
        nlohmann::json::parse(R"({"activation": 31457280, "parameter": 25165824})"));
  const nlohmann::json by_site = nlohmann::json::array({{{"site", "forward (model.py:40)"},
                                                         {"category", "activation"},
                                                         {"bytes", 30 * MiB},
                                                         {"count", 1}},
                                                        {{"site", "<module> (train.py:5)"},
                                                         {"category", "parameter"},
                                                         {"bytes", 24 * MiB},
                                                         {"count", 1}}});
  CHECK(o["held_by_site"] == by_site);
  CHECK(o["held_at"] == nlohmann::json::parse(R"({"step": 2, "phase": "forward"})"));
  CHECK_FALSE(o.contains("whatif"));
}
