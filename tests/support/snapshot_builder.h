// Contract: builds cumemtrace-style snapshots for tests the way the live collector lays them
// out — per allocation segment_alloc + alloc (frames on alloc), per free free_requested +
// free_completed + segment_free, live allocations as one-block segments — so analysis tests do not
// depend on the collector being present. Header-only; used by the unit tests, the scenario
// generator for CLI/fuzz tests and the benchmark.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "snapshot/snapshot.h"

namespace cumemtrace::testing {

class SnapshotBuilder {
 public:
  explicit SnapshotBuilder(int devices = 1) {
    s_.device_traces.resize(static_cast<size_t>(devices));
    s_.tool.emplace();
    auto& t = *s_.tool;
    t.tool_version = "0.1.0";
    t.pid = 1234;
    t.ppid = 1;
    t.exe = "/usr/bin/app";
    t.argv = {"./app", "--steps", "3"};
    t.hostname = "ci";
    t.start_time_us = 1'000'000;
    t.ended.how = "exit";
  }

  // Innermost frame first, each {function, file, line}.
  int32_t stack(const std::vector<snap::Frame>& frames) {
    for (size_t i = 0; i < s_.stacks.size(); ++i) {
      if (s_.stacks[i] == frames) return static_cast<int32_t>(i);
    }
    s_.stacks.push_back(frames);
    return static_cast<int32_t>(s_.stacks.size() - 1);
  }
  // A typical collector stack: runtime frames, then the program's site and its callers.
  int32_t site(const std::string& fn, const std::string& file, int64_t line,
               const std::string& caller = "main") {
    return stack({{"libcumemtrace.so", 0, "cuMemAlloc_v2"},
                  {"libcudart.so.12", 0, "cudaMalloc"},
                  {file, line, fn},
                  {file, line + 100, caller}});
  }

  void alloc(uint64_t addr, uint64_t size, int32_t stack, int device = 0) {
    auto& tr = s_.device_traces[static_cast<size_t>(device)];
    const int64_t t = next_time();
    tr.push_back({snap::Action::kSegmentAlloc, addr, size, 0, t, snap::kNoStack, 0, 7});
    tr.push_back({snap::Action::kAlloc, addr, size, 0, t, stack, 0, 7});
    live_[{device, addr}] = {size, stack};
    ++events_;
  }
  void free(uint64_t addr, int device = 0) {
    auto& tr = s_.device_traces[static_cast<size_t>(device)];
    const int64_t t = next_time();
    const uint64_t size = live_.count({device, addr}) ? live_[{device, addr}].first : 0;
    tr.push_back({snap::Action::kFreeRequested, addr, size, 0, t, snap::kNoStack, 0, 7});
    tr.push_back({snap::Action::kFreeCompleted, addr, size, 0, t, snap::kNoStack, 0, 7});
    tr.push_back({snap::Action::kSegmentFree, addr, size, 0, t, snap::kNoStack, 0, 7});
    live_.erase({device, addr});
    ++events_;
  }
  // A driver allocation that failed (cumemtrace's own `oom` entry), the device `device_free`.
  void oom(uint64_t size, int32_t stack, uint64_t device_free = 0, int device = 0) {
    auto& tr = s_.device_traces[static_cast<size_t>(device)];
    tr.push_back({snap::Action::kOom, 0, size, 0, next_time(), stack, device_free, 7});
    ++events_;
  }
  void mark(const std::string& name, int device = 0) { annotate(name, "MARK", device); }
  // stage START, END or MARK, timed after every entry so far.
  void annotate(const std::string& name, const std::string& stage, int device = 0) {
    s_.annotations.push_back({name, stage, device, next_time()});
  }
  void anomaly(const std::string& kind, uint64_t addr, int32_t stack) {
    s_.tool->anomalies.push_back({kind, addr, "cudaFree", stack, next_time(), 7});
    ++events_;
  }
  void drops(uint64_t n) { s_.tool->events_dropped = n; }
  snap::ToolSection& tool() { return *s_.tool; }

  snap::Snapshot finish() {
    snap::Snapshot out = s_;
    for (const auto& [key, v] : live_) {
      snap::Segment g;
      g.device = key.first;
      g.address = key.second;
      g.total_size = g.allocated_size = g.active_size = g.requested_size = v.first;
      g.stack = v.second;
      g.blocks.push_back({key.second, v.first, v.first, "active_allocated", v.second});
      out.segments.push_back(g);
    }
    out.tool->events_total = events_ + out.tool->events_dropped;
    out.tool->end_time_us = time_;
    return out;
  }

 private:
  int64_t next_time() { return time_ += 10; }

  snap::Snapshot s_;
  std::map<std::pair<int, uint64_t>, std::pair<uint64_t, int32_t>> live_;
  uint64_t events_ = 0;
  int64_t time_ = 1'000'000;
};

}  // namespace cumemtrace::testing
