#include "support/sample_snapshots.h"

#include <string>

namespace cumemtrace::viz::testing {

namespace {

snap::TraceEntry entry(snap::Action a, uint64_t addr, uint64_t size, int64_t dt,
                       int32_t stack = -1) {
  snap::TraceEntry e;
  e.action = a;
  e.addr = addr;
  e.size = size;
  e.time_us = kT0 + dt;
  e.stack = stack;
  return e;
}

void alloc(std::vector<snap::TraceEntry>& t, uint64_t addr, uint64_t size, int64_t dt,
           int32_t stack) {
  t.push_back(entry(snap::Action::kSegmentAlloc, addr, size, dt));
  t.push_back(entry(snap::Action::kAlloc, addr, size, dt, stack));
}

void free_(std::vector<snap::TraceEntry>& t, uint64_t addr, uint64_t size, int64_t dt) {
  t.push_back(entry(snap::Action::kFreeRequested, addr, size, dt));
  t.push_back(entry(snap::Action::kFreeCompleted, addr, size, dt));
  t.push_back(entry(snap::Action::kSegmentFree, addr, size, dt));
}

}  // namespace

snap::Snapshot leak_snapshot() {
  constexpr uint64_t kMiB = 1 << 20;
  snap::Snapshot s;
  s.stacks = {
      {{"train.cpp", 10, "train_step(int)"}, {"main.cpp", 5, "main"}},
      {{"cache.cpp", 42, "leaky_cache_grow(unsigned long)"}, {"main.cpp", 6, "main"}},
      {{"scratch.cpp", 7, "scratch"}, {"main.cpp", 7, "main"}},
  };
  auto& t = s.device_traces.emplace_back();
  alloc(t, 0x7f0000000000, kMiB, 10, 0);
  alloc(t, 0x7f0000100000, 4 * kMiB, 20, 1);
  alloc(t, 0x7f0000600000, 2 * kMiB, 30, 2);
  free_(t, 0x7f0000000000, kMiB, 40);
  free_(t, 0x7f0000600000, 2 * kMiB, 50);
  snap::TraceEntry oom = entry(snap::Action::kOom, 0, 64 * kMiB, 60, 2);
  oom.device_free = 3 * kMiB;
  t.push_back(oom);
  snap::Segment g;
  g.address = 0x7f0000100000;
  g.total_size = g.allocated_size = g.active_size = g.requested_size = 4 * kMiB;
  g.stack = 1;
  g.blocks.push_back({0x7f0000100000, 4 * kMiB, 4 * kMiB, "active_allocated", 1});
  s.segments.push_back(g);
  s.annotations = {{"step", "START", 0, kT0 + 5},
                   {"step", "END", 0, kT0 + 45},
                   {"checkpoint", "MARK", 0, kT0 + 55}};
  return s;
}

snap::Snapshot busy_snapshot(size_t allocs, size_t sites) {
  snap::Snapshot s;
  for (size_t i = 0; i < sites; ++i) {
    s.stacks.push_back({{"model_" + std::to_string(i) + ".py", static_cast<int64_t>(i + 1),
                         "layer_" + std::to_string(i)},
                        {"train.py", 100, "main \xc3\xa9t\xc3\xa9 \xe2\x86\x92"}});
  }
  s.device_traces.resize(2);
  for (size_t i = 0; i < allocs; ++i) {
    auto& t = s.device_traces[i % 2];
    const uint64_t addr = 0x7ff000000000ull + (i % 64) * 0x100000;
    const uint64_t size = (uint64_t{1} << (i % 30)) + i;
    const auto stack = static_cast<int32_t>(i % sites);
    alloc(t, addr, size, static_cast<int64_t>(2 * i), stack);
    free_(t, addr, size, static_cast<int64_t>(2 * i + 1));
  }
  s.allocator_settings = {{"tool", "cumemtrace"}, {"mode", "cudaMalloc interception"}};
  snap::ToolSection tool;
  tool.tool_version = "0.1.0";
  tool.pid = 4242;
  tool.exe = "/usr/bin/python3";
  tool.argv = {"python3", "train.py", "--big"};
  tool.hostname = "node-1";
  tool.rank = {{"RANK", "3"}};
  tool.start_time_us = kT0;
  tool.end_time_us = kT0 + 99;
  tool.ended = {"signal", 0, 9};
  tool.events_total = allocs * 5;
  tool.devices = {{0, 1 << 20, kT0 + 3, 0, allocs / 2, allocs / 2}};
  tool.anomalies = {{"double_free", 0xdead, "cudaFree", 0, kT0 + 7, 11}};
  tool.threads = {{"11", "main"}};
  s.tool = tool;
  return s;
}

}  // namespace cumemtrace::viz::testing
