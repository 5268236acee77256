#include <catch2/catch.hpp>

#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "support/sample_snapshots.h"
#include "viz/perfetto_writer.h"

using namespace cumemtrace;
using namespace cumemtrace::viz;
using nlohmann::json;

TEST_CASE("perfetto trace of the leak snapshot") {
  const json j = json::parse(to_perfetto(testing::leak_snapshot()));
  REQUIRE(j.contains("traceEvents"));
  const auto& ev = j["traceEvents"];
  std::map<std::string, int> ph;
  std::vector<uint64_t> live;
  const json* step = nullptr;
  const json* leak = nullptr;
  const json* oom = nullptr;
  for (const auto& e : ev) {
    REQUIRE(e.contains("ph"));
    REQUIRE(e.contains("pid"));
    ph[e["ph"]]++;
    if (e["ph"] != "M") {
      REQUIRE(e["ts"].is_number_integer());
      REQUIRE(e["ts"].get<int64_t>() >= testing::kT0);
    }
    if (e["ph"] == "C" && e["name"] == "live") live.push_back(e["args"]["bytes"]);
    if (e["ph"] == "X" && e["name"] == "step") step = &e;
    if (e["ph"] == "i" && e["name"] == "leaky_cache_grow(...) (cache.cpp:42)") leak = &e;
    if (e["ph"] == "i" && e["name"] == "OOM") oom = &e;
    if (e["ph"] == "i" || e["ph"] == "X") REQUIRE(e.contains("tid"));
  }
  REQUIRE(ph["M"] == 3);  // process name, two thread names
  REQUIRE(live == std::vector<uint64_t>{1u << 20, 5u << 20, 7u << 20, 6u << 20, 4u << 20});
  REQUIRE(step);
  REQUIRE((*step)["ts"] == testing::kT0 + 5);
  REQUIRE((*step)["dur"] == 40);
  REQUIRE(leak);
  REQUIRE((*leak)["args"]["bytes"] == 4u << 20);
  REQUIRE((*leak)["args"]["addr"] == "0x7f0000100000");
  REQUIRE(oom);
  REQUIRE((*oom)["s"] == "g");
  REQUIRE((*oom)["args"]["device_free"] == 3u << 20);
  // The allocation's "sf" walks up the stackFrames tree from the site to main.
  const auto& frames = j["stackFrames"];
  std::string id = (*leak)["sf"];
  std::vector<std::string> names;
  while (true) {
    const auto& f = frames.at(id);
    names.push_back(f["name"]);
    if (!f.contains("parent")) break;
    id = f["parent"];
  }
  REQUIRE(names ==
          std::vector<std::string>{"leaky_cache_grow(...) (cache.cpp:42)", "main (main.cpp:6)"});
  REQUIRE(ph["C"] == 5 + 5);  // live and reserved samples
}

TEST_CASE("perfetto stack text in args, bounded, and unmatched marks") {
  auto s = testing::leak_snapshot();
  s.annotations.push_back({"open-ended", "START", 0, testing::kT0 + 50});
  s.annotations.push_back({"never-started", "END", 0, testing::kT0 + 51});
  s.stacks[1].insert(s.stacks[1].begin(), {{"deep.cpp", 1, "inner_a"}, {"deep.cpp", 2, "inner_b"}});
  const json j = json::parse(to_perfetto(s, {2}));
  bool open_ended = false, never_started = false, has_stack = false;
  for (const auto& e : j["traceEvents"]) {
    if (e["name"] == "open-ended") {
      open_ended = true;
      REQUIRE(e["dur"] == 10);  // runs to the last event
    }
    if (e["name"] == "never-started") never_started = true;
    if (e["ph"] == "i" && e.contains("args") && e["args"].contains("stack") &&
        e["name"] == "inner_a (deep.cpp:1)") {
      has_stack = true;
      REQUIRE(e["args"]["stack"] == "inner_a (deep.cpp:1)\ninner_b (deep.cpp:2)\n(2 more)");
    }
  }
  REQUIRE(open_ended);
  // Bound to a name: a range-for over a member of a temporary would read freed memory.
  const json no_stacks = json::parse(to_perfetto(s, {0}));
  for (const auto& e : no_stacks["traceEvents"])
    REQUIRE_FALSE((e.contains("args") && e["args"].contains("stack")));
  REQUIRE_FALSE(never_started);
  REQUIRE(has_stack);
}

TEST_CASE("perfetto trace of two devices and odd names is valid JSON") {
  auto s = testing::busy_snapshot(1000, 5);
  s.stacks[0][0].name = "we\"ird\\ </script>\x01\xff";
  const json j = json::parse(to_perfetto(s));
  std::set<int> pids;
  for (const auto& e : j["traceEvents"]) pids.insert(e["pid"].get<int>());
  // The sample is rank 3 (RANK=3): its devices' pids are rank 3's, the same in every file.
  REQUIRE(pids == std::set<int>{4001, 4002});
  REQUIRE(j["otherData"]["pid"] == 4242);
}
