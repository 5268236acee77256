#include <catch2/catch.hpp>

#include "support/sample_snapshots.h"
#include "viz/collapsed_writer.h"

using namespace cumemtrace;
using namespace cumemtrace::viz;

TEST_CASE("folded stacks at the peak and at exit") {
  const auto s = testing::leak_snapshot();
  REQUIRE(to_collapsed(s, CollapsedMoment::kPeak) ==
          "cuda:0;main (main.cpp:5);train_step(...) (train.cpp:10) 1048576\n"
          "cuda:0;main (main.cpp:6);leaky_cache_grow(...) (cache.cpp:42) 4194304\n"
          "cuda:0;main (main.cpp:7);scratch (scratch.cpp:7) 2097152\n");
  REQUIRE(to_collapsed(s, CollapsedMoment::kExit) ==
          "cuda:0;main (main.cpp:6);leaky_cache_grow(...) (cache.cpp:42) 4194304\n");
}

TEST_CASE("folded stacks sum identical stacks and keep frames whole") {
  snap::Snapshot s;
  s.stacks = {{{"a;b.py", 1, "f;g"}}, {{"a;b.py", 1, "f;g"}}};
  auto& t = s.device_traces.emplace_back();
  t.push_back({snap::Action::kAlloc, 0x10, 5, 0, 1, 0, 0, 0});
  t.push_back({snap::Action::kAlloc, 0x20, 7, 0, 2, 1, 0, 0});
  t.push_back({snap::Action::kAlloc, 0x30, 1, 0, 3, -1, 0, 0});
  // PyTorch's file without segments holds nothing at exit; its peak is the three tensors.
  REQUIRE(to_collapsed(s, CollapsedMoment::kExit).empty());
  REQUIRE(to_collapsed(s, CollapsedMoment::kPeak) ==
          "cuda:0;<no stack> 1\n"
          "cuda:0;f:g (a:b.py:1) 12\n");
}
