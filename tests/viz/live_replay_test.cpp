#include <catch2/catch.hpp>

#include "sample_snapshots.h"
#include "viz/live_replay.h"

using namespace cumemtrace;
using namespace cumemtrace::viz;

TEST_CASE("peak and live sets of the leak snapshot") {
  const auto s = testing::leak_snapshot();
  REQUIRE(devices_of(s) == std::vector<int>{0});
  REQUIRE(preexisting_blocks(s, 0).empty());
  const auto p = find_peak(s, 0);
  REQUIRE(p.bytes == 7u << 20);
  REQUIRE(p.time_us == testing::kT0 + 30);
  REQUIRE(p.entries_applied == 6);
  const auto at_peak = live_after(s, 0, p.entries_applied);
  REQUIRE(at_peak.size() == 3);
  const auto at_exit = live_after(s, 0, SIZE_MAX);
  REQUIRE(at_exit.size() == 1);
  REQUIRE(at_exit[0].size == 4u << 20);
  REQUIRE(at_exit[0].stack == 1);
}

TEST_CASE("a trace that starts mid-run counts older blocks from the start") {
  snap::Snapshot s;
  auto& t = s.device_traces.emplace_back();
  // Freed without being seen allocated: 100 bytes were live before the trace.
  t.push_back({snap::Action::kFreeCompleted, 0x1000, 100, 0, 10, -1, 0, 0});
  t.push_back({snap::Action::kAlloc, 0x2000, 50, 0, 20, -1, 0, 0});
  // Live at the end per the segments, never allocated in the trace: 30 bytes older still.
  snap::Segment g;
  g.address = 0x9000;
  g.total_size = 64;
  g.blocks = {{0x9000, 32, 30, "active_allocated", -1}, {0x9020, 32, 0, "inactive", -1}};
  s.segments.push_back(g);
  const auto pre = preexisting_blocks(s, 0);
  REQUIRE(pre.size() == 2);
  LiveTracker live(pre);
  REQUIRE(live.live_bytes() == 130);
  live.apply(t[0]);
  REQUIRE(live.live_bytes() == 30);
  live.apply(t[1]);
  REQUIRE(live.live_bytes() == 80);
  REQUIRE(find_peak(s, 0).bytes == 130);
  REQUIRE(find_peak(s, 0).entries_applied == 0);
}

TEST_CASE("an alloc over a live address replaces the block") {
  LiveTracker live({});
  live.apply({snap::Action::kAlloc, 0x10, 100, 0, 1, 0, 0, 0});
  auto c = live.apply({snap::Action::kAlloc, 0x10, 40, 0, 2, 1, 0, 0});
  REQUIRE(c);
  REQUIRE(c->added);
  REQUIRE(live.replaced);
  REQUIRE(live.replaced->size == 100);
  REQUIRE(live.live_bytes() == 40);
  REQUIRE_FALSE(live.apply({snap::Action::kFreeCompleted, 0x99, 5, 0, 3, -1, 0, 0}));
  REQUIRE(live.live_bytes() == 40);
}

TEST_CASE("reserved bytes follow segment events and never wrap") {
  LiveTracker live({});
  live.apply({snap::Action::kSegmentAlloc, 0x10, 100, 0, 1, -1, 0, 0});
  live.apply({snap::Action::kSegmentMap, 0x80, 20, 0, 1, -1, 0, 0});
  REQUIRE(live.reserved_bytes() == 120);
  live.apply({snap::Action::kSegmentFree, 0x10, 500, 0, 1, -1, 0, 0});
  REQUIRE(live.reserved_bytes() == 0);
}
