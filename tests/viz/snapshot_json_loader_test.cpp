#include <catch2/catch.hpp>

#include "sample_snapshots.h"
#include "snapshot_json_writer.h"
#include "viz/snapshot_json_loader.h"

using namespace cumemtrace;
using namespace cumemtrace::viz;

namespace {

// Stacks compared by content: the loader interns them in its own order.
snap::Stack stack_of(const snap::Snapshot& s, int32_t id) {
  return id < 0 ? snap::Stack{} : s.stacks.at(static_cast<size_t>(id));
}

}  // namespace

TEST_CASE("the fallback loader reads back what the JSON writer wrote") {
  const auto in = testing::busy_snapshot(200, 5);
  const auto out = snapshot_from_json(nlohmann::json::parse(snap::to_json(in)), "busy");
  REQUIRE(out.device_traces.size() == in.device_traces.size());
  for (size_t d = 0; d < in.device_traces.size(); ++d) {
    REQUIRE(out.device_traces[d].size() == in.device_traces[d].size());
    for (size_t i = 0; i < in.device_traces[d].size(); ++i) {
      const auto& a = in.device_traces[d][i];
      const auto& b = out.device_traces[d][i];
      REQUIRE(a.action == b.action);
      REQUIRE(a.addr == b.addr);
      REQUIRE(a.size == b.size);
      REQUIRE(a.time_us == b.time_us);
      // Frees carry no frames in the file, so only allocations keep their stacks.
      if (a.action == snap::Action::kAlloc)
        REQUIRE(stack_of(in, a.stack) == stack_of(out, b.stack));
    }
  }
  REQUIRE(out.tool);
  REQUIRE(out.tool->pid == 4242);
  REQUIRE(out.tool->ended.signal == 9);
  REQUIRE(out.tool->anomalies.size() == 1);
  REQUIRE(out.allocator_settings == in.allocator_settings);

  const auto leak = testing::leak_snapshot();
  const auto back = snapshot_from_json(nlohmann::json::parse(snap::to_json(leak)), "leak");
  REQUIRE(back.segments.size() == 1);
  REQUIRE(back.segments[0].blocks.at(0).state == "active_allocated");
  REQUIRE(stack_of(back, back.segments[0].blocks[0].stack) == leak.stacks[1]);
  REQUIRE(back.annotations.size() == 3);
}

TEST_CASE("the fallback loader refuses what is not a snapshot") {
  REQUIRE_THROWS_WITH(snapshot_from_json(nlohmann::json::parse("[1,2]"), "x.json"),
                      Catch::Contains("x.json: not a memory snapshot"));
  REQUIRE_THROWS_WITH(load_snapshot_json_file("/nonexistent/y.json"),
                      Catch::Contains("cannot open /nonexistent/y.json"));
}
