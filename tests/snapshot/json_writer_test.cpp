// The JSON writer: PyTorch's layout, exact values, escaping, and never overwriting a file.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "snapshot/snapshot_json_writer.h"

using namespace cumemtrace::snap;

namespace {

Snapshot sample() {
  Snapshot s;
  s.stacks.push_back({Frame{"a \"quoted\"\\path\n.cpp", 42, "f<int>()"}});
  Segment g;
  g.device = 1;
  g.address = 0x7f0000000000;
  g.total_size = g.allocated_size = g.active_size = g.requested_size = 2048;
  g.stack = 0;
  g.blocks.push_back(Block{g.address, 2048, 2048, "active_allocated", 0});
  s.segments.push_back(g);
  s.device_traces.resize(2);
  s.device_traces[1].push_back(
      TraceEntry{Action::kAlloc, g.address, 2048, 5, 1795312050481693, 0, 0, 9});
  s.device_traces[1].push_back(
      TraceEntry{Action::kOom, 0, 1 << 30, 0, 1795312050481700, 0, 777, 9});
  s.annotations.push_back(Annotation{"step", "START", 1, 1795312050481000});
  ToolSection t;
  t.pid = 1234;
  t.exe = "/bin/app";
  t.argv = {"app", "--x"};
  t.devices.push_back(DeviceSummary{1, 4096, 1795312050481693, 2048, 2, 1});
  s.tool = t;
  return s;
}

}  // namespace

TEST_CASE("a snapshot written and parsed back keeps every value") {
  const auto j = nlohmann::json::parse(to_json(sample()));
  REQUIRE(j["segments"].size() == 1);
  REQUIRE(j["segments"][0]["address"] == 0x7f0000000000ull);
  REQUIRE(j["segments"][0]["blocks"][0]["frames"][0]["filename"] == "a \"quoted\"\\path\n.cpp");
  REQUIRE(j["segments"][0]["segment_pool_id"] == nlohmann::json::array({0, 0}));
  REQUIRE(j["device_traces"].size() == 2);
  REQUIRE(j["device_traces"][0].empty());
  const auto& alloc = j["device_traces"][1][0];
  REQUIRE(alloc["action"] == "alloc");
  REQUIRE(alloc["stream"] == 5);
  REQUIRE(alloc["time_us"] == 1795312050481693ll);
  REQUIRE(alloc["frames"][0]["name"] == "f<int>()");
  REQUIRE(alloc["frames"][0]["line"] == 42);
  const auto& oom = j["device_traces"][1][1];
  REQUIRE(oom["action"] == "oom");
  REQUIRE_FALSE(oom.contains("addr"));  // PyTorch's oom entries carry device_free instead
  REQUIRE(oom["device_free"] == 777);
  REQUIRE(j["external_annotations"][0]["stage"] == "START");
  REQUIRE(j["cumemtrace"]["pid"] == 1234);
  REQUIRE(j["cumemtrace"]["argv"][1] == "--x");
  REQUIRE(j["cumemtrace"]["devices"][0]["peak_bytes"] == 4096);
  REQUIRE_FALSE(j.contains("categories"));
}

TEST_CASE("write_snapshot_file never overwrites and never follows symlinks") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("ct-writer-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string base = (dir / "app.1.json").string();
  REQUIRE(write_snapshot_file(sample(), base) == base);
  REQUIRE(write_snapshot_file(sample(), base) == (dir / "app.1.1.json").string());
  std::filesystem::create_symlink("/tmp/should-not-be-written", dir / "link.json");
  REQUIRE(write_snapshot_file(sample(), (dir / "link.json").string()) ==
          (dir / "link.1.json").string());
  REQUIRE_FALSE(std::filesystem::exists("/tmp/should-not-be-written"));
  std::filesystem::remove_all(dir);
}
