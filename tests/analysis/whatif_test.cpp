// The model of PyTorch's caching allocator and `whatif`'s replay: request streams whose segment
// events are derived by hand from the allocator's rules (each case says how), the recorded
// configuration reproduced on PyTorch's own 2.11 snapshot, and refusals.
#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "analysis/frames.h"
#include "analysis/model.h"
#include "io/snapshot_input.h"
#include "pytorch/torch_allocator_model.h"
#include "pytorch/whatif.h"
#include "support/torch_fixture.h"

using namespace cumemtrace;
using namespace cumemtrace::analysis;
using torch_alloc::AllocatorConfig;
using torch_alloc::Budget;
using torch_alloc::CachingAllocatorModel;

namespace {

constexpr uint64_t MiB = 1048576;

AllocatorConfig conf(const std::string& text) {
  std::string error;
  auto c = torch_alloc::parse_alloc_conf(text, &error);
  INFO(error);
  REQUIRE(c);
  return *c;
}

// "segment_alloc 20971520 segment_free 2097152 ..." of the model's events since the last call.
std::string events(CachingAllocatorModel& m) {
  std::string out;
  for (const auto& e : m.take_events()) {
    // Appended piece by piece: GCC 12 at -O3 (Release) warns a false -Wrestrict on
    // const char* + std::string&&.
    if (!out.empty()) out += ' ';
    out += snap::action_name(e.action);
    out += ' ';
    out += std::to_string(e.size);
  }
  return out;
}

// PyTorch's own snapshot (no tool section), built entry by entry as its recorder writes them.
struct TorchTrace {
  snap::Snapshot s;
  int64_t t = 1'700'000'000'000'000;
  TorchTrace() {
    s.device_traces.resize(1);
    s.allocator_settings["PYTORCH_CUDA_ALLOC_CONF"] = "";
    s.stacks.push_back({{"train.py", 42, "forward"}});
  }
  void add(snap::Action a, uint64_t addr, uint64_t size, uint64_t device_free = 0) {
    snap::TraceEntry e;
    e.action = a;
    e.addr = addr;
    e.size = size;
    e.time_us = t += 10;
    e.device_free = device_free;
    e.stack = a == snap::Action::kAlloc || a == snap::Action::kOom ? 0 : snap::kNoStack;
    s.device_traces[0].push_back(e);
  }
  void segment(uint64_t addr, uint64_t size) { add(snap::Action::kSegmentAlloc, addr, size); }
  void segment_free(uint64_t addr, uint64_t size) { add(snap::Action::kSegmentFree, addr, size); }
  void alloc(uint64_t addr, uint64_t size) { add(snap::Action::kAlloc, addr, size); }
  void free(uint64_t addr, uint64_t size) {
    add(snap::Action::kFreeRequested, addr, size);
    add(snap::Action::kFreeCompleted, addr, size);
  }
};

// Nine 6 MiB tensors, three per 20 MiB segment; six freed so that each segment keeps one; then
// 15 MiB, which no free block holds (14, 12, 8, 6 and 2 MiB pieces), whose 16 MiB segment does
// not fit the 64 MiB device (60 MiB reserved, 4 MiB free) and no unsplit segment can be freed:
// PyTorch's OOM, with 42 MiB cached free.
TorchTrace fragmentation_oom() {
  TorchTrace tr;
  const uint64_t S[3] = {0x7f0000000000, 0x7f0002000000, 0x7f0004000000};
  const uint64_t sz = 6 * MiB;
  for (int g = 0; g < 3; ++g) {
    tr.segment(S[g], 20 * MiB);
    for (int j = 0; j < 3; ++j) tr.alloc(S[g] + j * sz, sz);
  }
  // Keep t1, t5, t9 (the first of S1, the middle of S2, the last of S3).
  tr.free(S[0] + sz, sz);
  tr.free(S[0] + 2 * sz, sz);
  tr.free(S[1], sz);
  tr.free(S[1] + 2 * sz, sz);
  tr.free(S[2], sz);
  tr.free(S[2] + sz, sz);
  tr.add(snap::Action::kOom, 0, 15 * MiB, 4 * MiB);
  return tr;
}

}  // namespace

TEST_CASE("allocator configuration in PyTorch's syntax", "[whatif]") {
  const auto c = conf(
      "expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.6,"
      "roundup_power2_divisions:[256:1,512:2,>:4]");
  CHECK(c.expandable_segments);
  CHECK(c.max_split_size == 128 * MiB);
  CHECK(c.garbage_collection_threshold == 0.6);
  // Intervals are powers of 2 MiB: index 8 = 256 MiB, 9 = 512 MiB; before the first, its value.
  CHECK(c.roundup_power2_divisions[0] == 1);
  CHECK(c.roundup_power2_divisions[8] == 1);
  // PyTorch's '>' fills from the last interval named, that one included.
  CHECK(c.roundup_power2_divisions[9] == 4);
  CHECK(c.roundup_power2_divisions[10] == 4);
  CHECK(c.roundup_power2_divisions[15] == 4);
  std::string error;
  CHECK_FALSE(torch_alloc::parse_alloc_conf("max_split_size_mb:10", &error));
  CHECK(error ==
        "allocator configuration 'max_split_size_mb:10': max_split_size_mb too small, "
        "must be >= 20");
  CHECK_FALSE(torch_alloc::parse_alloc_conf("expandable_segments:true", &error));
  CHECK(error ==
        "allocator configuration 'expandable_segments:true': expected True or False for "
        "expandable_segments, not 'true'");
  CHECK_FALSE(torch_alloc::parse_alloc_conf("expandable:True", &error));
  CHECK(error ==
        "allocator configuration 'expandable:True': unrecognized CachingAllocator "
        "option: expandable");
  CHECK_FALSE(torch_alloc::parse_alloc_conf("backend:cudaMallocAsync", &error));
  CHECK(torch_alloc::parse_alloc_conf("backend:native,release_lock_on_cudamalloc:True", &error));
}

TEST_CASE("rounding and segment sizes follow PyTorch's rules", "[whatif]") {
  const AllocatorConfig d;
  CHECK(torch_alloc::round_size(d, 1) == 512);
  CHECK(torch_alloc::round_size(d, 1000) == 1024);
  CHECK(torch_alloc::round_size(d, 4'000'000) == 4'000'256);
  CHECK(torch_alloc::allocation_size(d, 1024) == 2 * MiB);  // small pool
  CHECK(torch_alloc::allocation_size(d, MiB) == 2 * MiB);   // 1 MiB is still small
  CHECK(torch_alloc::allocation_size(d, MiB + 512) == 20 * MiB);
  CHECK(torch_alloc::allocation_size(d, 10 * MiB) == 10 * MiB);  // from 10 MiB: 2 MiB steps
  CHECK(torch_alloc::allocation_size(d, 25 * MiB) == 26 * MiB);
  // roundup_power2_divisions:4 between 1 GiB and 2 GiB: 1.25, 1.5, 1.75 GiB.
  const auto r = conf("roundup_power2_divisions:4");
  CHECK(torch_alloc::round_size(r, 1200 * MiB) == 1280 * MiB);
  CHECK(torch_alloc::round_size(r, 1024 * MiB) == 1024 * MiB);
  CHECK(torch_alloc::round_size(r, 1000) == 1024);  // not over 512 * 4: plain 512 B steps
}

TEST_CASE("default allocator: pools, splitting, reuse, merging, empty_cache", "[whatif]") {
  CachingAllocatorModel m(AllocatorConfig{}, std::nullopt);
  // 1000 B -> 1024 B in a new 2 MiB small segment.
  const auto a = m.malloc(1000, 0);
  CHECK(events(m) == "segment_alloc 2097152");
  // 3 MiB -> a 20 MiB large segment (requests under 10 MiB), split: 17 MiB free.
  const auto b = m.malloc(3 * MiB, 0);
  CHECK(events(m) == "segment_alloc 20971520");
  // 12 MiB + 1 -> 12583424 B from the 17 MiB remainder (best fit), no new segment.
  const auto c = m.malloc(12 * MiB + 1, 0);
  CHECK(events(m).empty());
  CHECK(m.block_size(c) == 12583424);
  // 25 MiB -> a 26 MiB segment; the 1 MiB remainder is not over 1 MiB: not split.
  const auto d = m.malloc(25 * MiB, 0);
  CHECK(events(m) == "segment_alloc 27262976");
  CHECK(m.block_size(d) == 27262976);
  CHECK(m.reserved() == 50331648);
  CHECK(m.allocated() == 1024 + 3 * MiB + 12583424 + 27262976);
  // Another stream's request never takes this stream's blocks.
  const auto e = m.malloc(1000, 7);
  CHECK(events(m) == "segment_alloc 2097152");
  m.free(e);
  // b and c freed: the 20 MiB segment is whole again; empty_cache frees it and the other
  // stream's 2 MiB segment, not the split small segment nor the one held by d.
  m.free(b);
  m.free(c);
  m.empty_cache();
  CHECK(events(m) == "segment_free 20971520 segment_free 2097152");
  CHECK(m.reserved() == 2 * MiB + 27262976);
  m.free(a);
  m.free(d);
  m.empty_cache();
  CHECK(events(m) == "segment_free 27262976 segment_free 2097152");
  CHECK(m.reserved() == 0);
}

TEST_CASE("expandable segments map pages on demand and grow at the end", "[whatif]") {
  CachingAllocatorModel m(conf("expandable_segments:True"), std::nullopt);
  const auto a = m.malloc(1000, 0);
  CHECK(events(m) == "segment_map 2097152");  // one 2 MiB page of the small pool's range
  const auto b = m.malloc(3 * MiB, 0);
  CHECK(events(m) == "segment_map 20971520");  // one 20 MiB page of the large pool's range
  const auto c = m.malloc(12 * MiB + 1, 0);    // from the 17 MiB left on that page
  CHECK(events(m).empty());
  // 25 MiB: 5242368 B free at the end of the mapped page + 20972032 B more: two pages.
  const auto d = m.malloc(25 * MiB, 0);
  CHECK(events(m) == "segment_map 41943040");
  CHECK(m.reserved() == 2 * MiB + 60 * MiB);
  // b, c free: [0, 15 MiB) holds no whole page, nor does the 20971008 B after d; a's page holds a.
  m.free(b);
  m.free(c);
  m.empty_cache();
  CHECK(events(m).empty());
  // Everything freed: every page unmapped.
  m.free(a);
  m.free(d);
  m.empty_cache();
  CHECK(events(m) == "segment_unmap 62914560 segment_unmap 2097152");
  CHECK(m.reserved() == 0);
}

TEST_CASE("max_split_size_mb keeps oversize blocks whole and frees them on a retry", "[whatif]") {
  // Default: 30 MiB freed, 25 MiB taken from it and the 5 MiB remainder split off (over 1 MiB);
  // 5 MiB fits that remainder exactly; 6 MiB needs a new 20 MiB segment.
  auto run = [](CachingAllocatorModel& m) {
    std::string out;
    auto step = [&](const char* what) { out += std::string(what) + ": " + events(m) + "; "; };
    const auto x = m.malloc(30 * MiB, 0);
    step("x");
    m.free(x);
    m.malloc(25 * MiB, 0);
    step("y");
    const auto z = m.malloc(5 * MiB, 0);
    step("z");
    m.free(z);
    m.malloc(6 * MiB, 0);
    step("w");
    return out;
  };
  CachingAllocatorModel d(AllocatorConfig{}, std::nullopt);
  CHECK(run(d) == "x: segment_alloc 31457280; y: ; z: ; w: segment_alloc 20971520; ");
  CHECK(d.reserved() == 50 * MiB);
  // max_split_size_mb:20: 25 MiB takes the 30 MiB block whole (oversize: never split), so 5 MiB
  // needs a 20 MiB segment, and 6 MiB may not take that block once free (>= max_split_size):
  // a second 20 MiB segment.
  CachingAllocatorModel s(conf("max_split_size_mb:20"), std::nullopt);
  CHECK(run(s) ==
        "x: segment_alloc 31457280; y: ; z: segment_alloc 20971520; w: segment_alloc 20971520; ");
  CHECK(s.reserved() == 70 * MiB);
  // Under a 60 MiB device that segment does not fit: the free oversize block is released first
  // (release_available_cached_blocks), then the retry succeeds.
  CachingAllocatorModel b(conf("max_split_size_mb:20"), Budget{60 * MiB, false});
  CHECK(run(b) ==
        "x: segment_alloc 31457280; y: ; z: segment_alloc 20971520; w: segment_free "
        "20971520 segment_alloc 20971520; ");
  CHECK(b.reserved() == 50 * MiB);
}

TEST_CASE("whatif: a fragmentation OOM that expandable segments avoid", "[whatif]") {
  const auto tr = fragmentation_oom();
  WhatIfOptions o;
  o.alloc_confs = {"expandable_segments:True", "max_split_size_mb:20"};
  const auto r = replay_whatif(tr.s, o);
  REQUIRE(r.size() == 1);
  const auto& w = r[0];
  CHECK(w.recorded_segment_events == 3);
  CHECK(w.empty_cache_calls == 0);
  CHECK(w.requests == 10);
  REQUIRE(w.budget);
  CHECK(w.budget->bytes == 64 * MiB);  // 60 MiB reserved + 4 MiB free on the device
  CHECK_FALSE(w.budget->fraction);
  REQUIRE(w.results.size() == 3);
  const auto& rec = w.results[0];
  CHECK(rec.recorded);
  CHECK(rec.reserved.bytes == 60 * MiB);
  CHECK(rec.allocated.bytes == 54 * MiB);
  CHECK(rec.fragmentation_bytes == 60 * MiB - 42 * MiB);  // at t7, when S3 was made
  REQUIRE(rec.first_failing_request);
  CHECK(rec.first_failing_request->recorded_oom);
  CHECK(rec.first_failing_request->entry == tr.s.device_traces[0].size() - 1);
  CHECK(rec.first_failing_request->requested == 15 * MiB);
  // Expandable: the nine tensors tile three 20 MiB pages; the freed ones merge into two 18 MiB
  // blocks, and 15 MiB fits in the first.
  const auto& ex = w.results[1];
  CHECK(ex.alloc_conf == "expandable_segments:True");
  CHECK(ex.reserved.bytes == 60 * MiB);
  CHECK(ex.allocated.bytes == 54 * MiB);
  CHECK(ex.segment_events == 3);
  CHECK_FALSE(ex.first_failing_request);
  // max_split_size_mb:20 changes nothing here: the same OOM.
  const auto& ms = w.results[2];
  REQUIRE(ms.first_failing_request);
  CHECK(ms.first_failing_request->recorded_oom);
  CHECK(ms.reserved.bytes == 60 * MiB);

  // The API the OOM verdict calls.
  std::string why;
  const auto v =
      oom_whatif(tr.s, 0, tr.s.device_traces[0].size() - 1, "expandable_segments:True", &why);
  INFO(why);
  REQUIRE(v);
  CHECK(v->would_succeed);
  CHECK(v->reserved.bytes == 60 * MiB);
  CHECK(v->recorded_reserved.bytes == 60 * MiB);
  CHECK_FALSE(oom_whatif(tr.s, 0, 0, "expandable_segments:True", &why));
  CHECK(why == "entry 0 of device 0 is not a PyTorch OOM");

  // JSON: one item per configuration.
  std::ostringstream out;
  print_whatif_json(r, SiteTable(tr.s), out);
  const auto j = nlohmann::json::parse(out.str());
  REQUIRE(j.size() == 3);
  CHECK(j[0]["alloc_conf"] == "");
  CHECK(j[0]["oom"] == true);
  CHECK(j[0]["first_failing_request"]["site"] == "forward (train.py:42)");
  CHECK(j[1]["oom"] == false);
  CHECK(j[1]["first_failing_request"].is_null());
  CHECK(j[1]["reserved_peak_bytes"] == 60 * MiB);
}

TEST_CASE("whatif: --budget below the recorded peak is a question, not a refusal", "[whatif]") {
  auto tr = fragmentation_oom();
  WhatIfOptions o;
  o.budget_bytes = 50 * MiB;  // the third 20 MiB segment does not fit
  o.alloc_confs = {"expandable_segments:True"};
  const auto r = replay_whatif(tr.s, o);
  REQUIRE(r.size() == 1);
  const auto& w = r[0];
  // The recorded run replays under the budget the recording shows; the others under 50 MiB.
  REQUIRE(w.recorded_budget);
  CHECK(w.recorded_budget->bytes == 64 * MiB);
  REQUIRE(w.budget);
  CHECK(w.budget->bytes == 50 * MiB);
  REQUIRE(w.results.size() == 3);
  CHECK(w.results[0].recorded);
  CHECK(w.results[0].reserved.bytes == 60 * MiB);
  // The recorded configuration under 50 MiB: the seventh tensor (entry 9) finds no room.
  const auto& under = w.results[1];
  CHECK(under.recorded_conf);
  CHECK(under.alloc_conf == "");
  REQUIRE(under.first_failing_request);
  CHECK(under.first_failing_request->entry == 9);
  CHECK_FALSE(under.first_failing_request->recorded_oom);
  CHECK(under.reserved.bytes == 40 * MiB);
  // Expandable segments: 54 MiB of tensors need three 20 MiB pages; the third does not fit.
  const auto& ex = w.results[2];
  REQUIRE(ex.first_failing_request);
  CHECK(ex.first_failing_request->entry == 9);
  CHECK(ex.reserved.bytes == 40 * MiB);
  std::ostringstream out;
  print_whatif_text(r, tr.s, SiteTable(tr.s), "t.json", out);
  CHECK(out.str().find("  budget of the other rows: 50.0 MiB (--budget)\n") != std::string::npos);
  CHECK(out.str().find("defaults (recorded, under --budget)") != std::string::npos);
}

TEST_CASE("whatif --sweep ranks the usual settings; --needs bisects the smallest budget",
          "[whatif]") {
  auto tr = fragmentation_oom();
  WhatIfOptions o;
  o.sweep = true;
  o.needs = true;
  const auto r = replay_whatif(tr.s, o);
  REQUIRE(r.size() == 1);
  const auto& res = r[0].results;
  REQUIRE(res.size() == 1 + kSweep.size());
  const WhatIfResult* ex = nullptr;
  const WhatIfResult* noop = nullptr;
  for (const auto& x : res) {
    if (x.alloc_conf == "expandable_segments:True") ex = &x;
    if (!x.recorded && x.alloc_conf.empty()) noop = &x;
    CHECK(x.rank >= 1);
    CHECK(x.rank <= res.size());
  }
  REQUIRE(ex);
  REQUIRE(noop);
  // The only one without an OOM ranks first; it needs its whole 60 MiB (three 20 MiB pages).
  CHECK(ex->rank == 1);
  CHECK_FALSE(ex->first_failing_request);
  REQUIRE(ex->needs_budget_bytes);
  CHECK(*ex->needs_budget_bytes == 60 * MiB);
  // The recorded configuration needs the 16 MiB segment the 15 MiB request asks for on top of
  // the 60 MiB it held: no cached block can be freed (every one is split).
  const auto& rec = res[0];
  REQUIRE(rec.needs_budget_bytes);
  CHECK(*rec.needs_budget_bytes == 76 * MiB);
  // A setting that changes nothing reproduces the recorded row exactly.
  CHECK(noop->reserved.bytes == rec.reserved.bytes);
  CHECK(noop->reserved.time_us == rec.reserved.time_us);
  CHECK(noop->allocated.bytes == rec.allocated.bytes);
  CHECK(noop->fragmentation_bytes == rec.fragmentation_bytes);
  CHECK(noop->segment_events == rec.segment_events);
  REQUIRE(noop->first_failing_request);
  CHECK(noop->first_failing_request->entry == rec.first_failing_request->entry);
  std::ostringstream out;
  print_whatif_text(r, tr.s, SiteTable(tr.s), "t.json", out);
  CHECK(out.str().find("rank  configuration") != std::string::npos);
  CHECK(out.str().find("needs at least") != std::string::npos);
}

TEST_CASE("fragmentation is PyTorch's inactive_split_bytes: a wholly free segment is cache",
          "[whatif]") {
  CachingAllocatorModel m(conf(""), std::nullopt);
  const int32_t big = m.malloc(30 * MiB, 0);   // a 30 MiB segment of its own
  const int32_t small = m.malloc(6 * MiB, 0);  // 6 MiB of a 20 MiB segment
  REQUIRE(big >= 0);
  REQUIRE(small >= 0);
  CHECK(m.inactive_split() == 14 * MiB);
  m.free(big);  // wholly free: empty_cache() returns it, nothing is fragmented by it
  CHECK(m.reserved() == 50 * MiB);
  CHECK(m.inactive_split() == 14 * MiB);
  m.free(small);  // merged back: the 20 MiB segment is one free block
  CHECK(m.inactive_split() == 0);
}

TEST_CASE("whatif: empty_cache() calls are found in the recording and replayed", "[whatif]") {
  TorchTrace tr;
  tr.segment(0x7f0000000000, 20 * MiB);
  tr.alloc(0x7f0000000000, 4 * MiB);
  tr.free(0x7f0000000000, 4 * MiB);
  tr.segment_free(0x7f0000000000, 20 * MiB);  // empty_cache(): nothing asked for memory after it
  tr.segment(0x7f0010000000, 20 * MiB);
  tr.alloc(0x7f0010000000, 4 * MiB);
  WhatIfOptions o;
  o.alloc_confs = {"expandable_segments:True"};
  const auto r = replay_whatif(tr.s, o);
  CHECK(r[0].empty_cache_calls == 1);
  CHECK(r[0].recorded_segment_events == 3);
  // Expandable: map 20 MiB, unmapped by empty_cache, mapped again.
  CHECK(r[0].results[1].segment_events == 3);
  CHECK(r[0].results[1].reserved.bytes == 20 * MiB);
}

TEST_CASE("whatif refuses a trace the model does not reproduce", "[whatif]") {
  TorchTrace tr;
  tr.segment(0x7f0000000000, 20 * MiB);  // PyTorch 2.11 makes 2 MiB for 1000 B
  tr.alloc(0x7f0000000000, 1000);
  CHECK_THROWS_WITH(replay_whatif(tr.s, {}),
                    "device 0: the model of torch 2.11's allocator does not reproduce the recorded "
                    "segments (before entry 1: recorded segment_alloc 20.0 MiB, model "
                    "segment_alloc 2.00 MiB); its predictions would not hold for this run");
  TorchTrace late;
  late.free(0x7f0000000000, 1000);
  CHECK_THROWS_WITH(replay_whatif(late.s, {}),
                    Catch::StartsWith("device 0: entry 1 frees a tensor at 0x7f0000000000 that the "
                                      "trace never allocated"));
  // PyTorch's own file: a segment of a private pool (segment_pool_id other than (0, 0)).
  TorchTrace graph;
  graph.segment(0x7f0000000000, 2 * MiB);
  graph.alloc(0x7f0000000000, 1000);
  snap::Segment pooled;
  pooled.address = 0x7f0000000000;
  pooled.total_size = 2 * MiB;
  pooled.segment_type = "small";
  pooled.private_pool = true;
  pooled.blocks = {{0x7f0000000000, 1024, 1000, "active_allocated", 0},
                   {0x7f0000000000 + 1024, 2 * MiB - 1024, 0, "inactive", snap::kNoStack}};
  graph.s.segments.push_back(pooled);
  CHECK_THROWS_WITH(replay_whatif(graph.s, {}),
                    "device 0: the segment at 0x7f0000000000 is a private pool's "
                    "(segment_pool_id: a CUDA graph's capture or a MemPool): the replay models "
                    "PyTorch's default pools only");
  TorchTrace bad;
  bad.alloc(0x7f0000000000, 1000);
  WhatIfOptions o;
  o.alloc_confs = {"max_split_size_mb:1"};
  CHECK_THROWS_AS(replay_whatif(bad.s, o), std::invalid_argument);
}

TEST_CASE("whatif on PyTorch's own 2.11 snapshot reproduces its segment events and peak",
          "[whatif][torch]") {
  const auto& facts = testing::torch_facts();
  const auto s = snap::read_snapshot_any(testing::kTorchPickle);
  WhatIfOptions o;
  o.alloc_confs = {"expandable_segments:True"};
  const auto r = replay_whatif(s, o);
  REQUIRE(r.size() == 1);
  const auto& actions = facts["trace_actions"];
  CHECK(r[0].recorded_segment_events ==
        actions["segment_alloc"].get<size_t>() + actions["segment_free"].get<size_t>());
  CHECK(r[0].requests == actions["alloc"].get<size_t>());
  CHECK(r[0].empty_cache_calls == 6);  // record.py calls it every 10 of its 60 steps
  CHECK_FALSE(r[0].budget);
  const auto& rec = r[0].results[0];
  // The recorded configuration replayed reaches PyTorch's own max_memory_reserved(), the
  // segments the model's parameters held before _record_memory_history included.
  CHECK(rec.reserved.bytes == facts["max_memory_reserved"].get<uint64_t>());
  CHECK_FALSE(rec.first_failing_request);
  // The allocated peak is PyTorch's max_memory_allocated(): the model counts blocks.
  CHECK(rec.allocated.bytes == facts["max_memory_allocated"].get<uint64_t>());
  // Fragmentation at the reserved peak is PyTorch's inactive_split_bytes: 14 MiB of the 54 MiB
  // cached then; the rest lies in wholly free segments, which empty_cache() would return.
  CHECK(rec.fragmentation_bytes == 14'633'984);
  // The last 1,500 entries only: a trace that starts late is refused.
  const auto tail = snap::read_snapshot_any(testing::kTorchLast1500);
  CHECK_THROWS_AS(replay_whatif(tail, o), CannotReplay);
  // A configuration that changes nothing (the defaults the run used, and a setting the caching
  // allocator ignores) replays the recorded row exactly, to the microsecond of its peak.
  WhatIfOptions same;
  same.alloc_confs = {"", "release_lock_on_cudamalloc:True"};
  const auto n = replay_whatif(s, same);
  REQUIRE(n[0].results.size() == 3);
  for (size_t i = 1; i < 3; ++i) {
    const auto& x = n[0].results[i];
    INFO(x.alloc_conf);
    CHECK(x.reserved.bytes == rec.reserved.bytes);
    CHECK(x.reserved.time_us == rec.reserved.time_us);
    CHECK(x.allocated.bytes == rec.allocated.bytes);
    CHECK(x.fragmentation_bytes == rec.fragmentation_bytes);
    CHECK(x.segment_events == rec.segment_events);
  }
}

TEST_CASE("block bytes: PyTorch's own 2.11 snapshot counts what memory_stats() counts",
          "[whatif][torch][blocks]") {
  const auto& facts = testing::torch_facts();
  auto s = snap::read_snapshot_any(testing::kTorchPickle);
  const uint64_t max_allocated = facts["max_memory_allocated"].get<uint64_t>();
  const uint64_t allocated = facts["memory_allocated"].get<uint64_t>();
  {
    // Requested bytes (the trace's sizes) fall short of PyTorch's counter.
    const DeviceReplay r(s, 0);
    CHECK(r.timeline().allocated.bytes < max_allocated);
  }
  std::vector<std::string> why;
  REQUIRE(label_block_sizes(s, &why) == 1);
  CHECK(why.empty());
  const DeviceReplay r(s, 0);
  const Timeline& tl = r.timeline();
  CHECK(tl.allocated.bytes == max_allocated);
  CHECK(tl.reserved.bytes == facts["max_memory_reserved"].get<uint64_t>());
  const auto last = static_cast<std::ptrdiff_t>(s.device_traces[0].size()) - 1;
  CHECK(r.allocated_after(last) == allocated);
  CHECK(r.reserved_after(last) == facts["memory_reserved"].get<uint64_t>());
  // The units of PyTorch's own file are its tensors: their bytes are blocks too, and the replay
  // still lands exactly on the end state (the segments' active blocks).
  CHECK(tl.end_bytes == allocated);
  CHECK(tl.trace.bytes == max_allocated);
  uint64_t at_exit = 0;
  for (const auto& a : live_at_exit(s)) at_exit += a.size;
  CHECK(at_exit == allocated);
  // Every labelled entry is a block, at least what was asked for.
  size_t labelled = 0;
  for (const auto& e : s.device_traces[0]) {
    if (!e.block_units) continue;
    ++labelled;
    CHECK(snap::block_size(e) >= e.size);
  }
  const auto& actions = facts["trace_actions"];
  CHECK(labelled == actions["alloc"].get<size_t>() + actions["free_requested"].get<size_t>() +
                        actions["free_completed"].get<size_t>());
  // A trace that starts late cannot be replayed: requested sizes stay, and the reason is given.
  auto tail = snap::read_snapshot_any(testing::kTorchLast1500);
  why.clear();
  CHECK(label_block_sizes(tail, &why) == 0);
  REQUIRE(why.size() == 1);
  CHECK(why[0].find("never allocated") != std::string::npos);
}

TEST_CASE("whatif: a setting that changes nothing breaks best-fit ties as the recorded run did",
          "[whatif]") {
  // Two 20 MiB segments, the second made at the LOWER address. Each holds two 8 MiB tensors; the
  // second of each is freed, leaving two free 12 MiB blocks: a tie best fit breaks by address.
  // The 12 MiB request takes the lower one (in the second segment); then the second segment's
  // first tensor is freed and 20 MiB needs a new segment (reserved 60 MiB). Taken the other way
  // (the model's own addresses grow in the order segments are made), the second segment would
  // be wholly free and hold the 20 MiB: 40 MiB, one segment event fewer.
  TorchTrace tr;
  const uint64_t hi = 0x7f0010000000, lo = 0x7f0000000000, next = 0x7f0020000000;
  tr.segment(hi, 20 * MiB);
  tr.alloc(hi, 8 * MiB);
  tr.alloc(hi + 8 * MiB, 8 * MiB);
  tr.segment(lo, 20 * MiB);
  tr.alloc(lo, 8 * MiB);
  tr.alloc(lo + 8 * MiB, 8 * MiB);
  tr.free(hi + 8 * MiB, 8 * MiB);
  tr.free(lo + 8 * MiB, 8 * MiB);
  tr.alloc(lo + 8 * MiB, 12 * MiB);
  tr.free(lo, 8 * MiB);
  tr.segment(next, 20 * MiB);
  tr.alloc(next, 20 * MiB);
  WhatIfOptions o;
  o.alloc_confs = {"", "release_lock_on_cudamalloc:True"};
  const auto r = replay_whatif(tr.s, o);
  REQUIRE(r[0].results.size() == 3);
  const auto& rec = r[0].results[0];
  CHECK(rec.reserved.bytes == 60 * MiB);
  CHECK(rec.segment_events == 3);
  for (size_t i = 1; i < 3; ++i) {
    const auto& x = r[0].results[i];
    INFO(x.alloc_conf);
    CHECK(x.reserved.bytes == rec.reserved.bytes);
    CHECK(x.reserved.time_us == rec.reserved.time_us);
    CHECK(x.segment_events == rec.segment_events);
    CHECK(x.fragmentation_bytes == rec.fragmentation_bytes);
    CHECK(x.own_address_segments == 0);  // every segment at its recorded address
  }
  // 40 MiB segments: none is the recorded kind and size, so each takes an address of the
  // model's own and the row says its ties may break otherwise.
  WhatIfOptions big;
  big.alloc_confs = {"large_segment_size_mb:40"};
  const auto b = replay_whatif(tr.s, big);
  CHECK(b[0].results[0].own_address_segments == 0);
  CHECK(b[0].results[1].own_address_segments == 1);  // the one 40 MiB segment it makes
}
