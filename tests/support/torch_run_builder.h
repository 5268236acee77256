// Contract: builds cumemtrace snapshots of a PyTorch run for tests and benchmarks, laid out the way
// the collector writes them with PyTorch's blocks merged in: PyTorch's segment_alloc, alloc,
// free_requested + free_completed entries (source pytorch), driver-level allocations of other
// libraries (segment_alloc + alloc, source driver), the automatic phase annotations (phases.h) and
// ownership walks, each at a time the test chooses. finish() adds the end state (segments with
// their live blocks, the rest of each PyTorch segment one inactive block) so that the replay starts
// from zero. Header-only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "snapshot/snapshot.h"

namespace cumemtrace::testing {

class TorchRunBuilder {
 public:
  static constexpr uint32_t kMainTid = 7;
  static constexpr uint32_t kAutogradTid = 9;

  TorchRunBuilder() {
    s_.device_traces.resize(1);
    s_.tool.emplace();
    auto& t = *s_.tool;
    t.tool_version = "0.1.0";
    t.pid = 4321;
    t.exe = "/usr/bin/python3";
    t.argv = {"python3", "train.py"};
    t.start_time_us = 0;
    t.ended.how = "exit";
    t.threads[std::to_string(kMainTid)] = "python3";
    t.threads[std::to_string(kAutogradTid)] = "pt_autograd_0";
    t.pytorch = snap::PytorchInfo{"2.11.0", "native", "blocks", "", false};
  }

  // A Python line as PyTorch's stack has it: the user's line outermost, a library frame inside.
  int32_t line(const std::string& file, int64_t ln, const std::string& fn = "step") {
    snap::Stack st = {{file, ln, fn}};
    for (size_t i = 0; i < s_.stacks.size(); ++i)
      if (s_.stacks[i] == st) return static_cast<int32_t>(i);
    s_.stacks.push_back(st);
    return static_cast<int32_t>(s_.stacks.size() - 1);
  }
  // Any stack, innermost frame first (one equal to an earlier one is that one).
  int32_t stack(const snap::Stack& st) {
    for (size_t i = 0; i < s_.stacks.size(); ++i)
      if (s_.stacks[i] == st) return static_cast<int32_t>(i);
    s_.stacks.push_back(st);
    return static_cast<int32_t>(s_.stacks.size() - 1);
  }
  int32_t native(const std::string& lib, const std::string& fn) {
    s_.stacks.push_back({{"libcudart.so.12", 0, "cudaMalloc"}, {lib, 0, fn}});
    return static_cast<int32_t>(s_.stacks.size() - 1);
  }

  void segment(int64_t t, uint64_t addr, uint64_t size) {
    push({snap::Action::kSegmentAlloc, addr, size, 0, t, snap::kNoStack, 0, kMainTid, false,
          snap::Source::kPytorch});
    segments_[addr] = size;
  }
  void segment_free(int64_t t, uint64_t addr) {
    push({snap::Action::kSegmentFree, addr, segments_[addr], 0, t, snap::kNoStack, 0, kMainTid,
          false, snap::Source::kPytorch});
    segments_.erase(addr);
  }
  void alloc(int64_t t, uint64_t addr, uint64_t size, int32_t stack, uint32_t tid = kMainTid) {
    push({snap::Action::kAlloc, addr, size, 0, t, stack, 0, tid, false, snap::Source::kPytorch});
    live_[addr] = {size, stack};
  }
  // A request of `size` whose block is larger (`block`: the allocator left an unsplit remainder
  // in it); the written segments hold the block, as PyTorch's snapshot does.
  void alloc_in_block(int64_t t, uint64_t addr, uint64_t size, uint64_t block, int32_t stack) {
    alloc(t, addr, size, stack);
    blocks_[addr] = block;
  }
  void free(int64_t t, uint64_t addr, uint32_t tid = kMainTid) {
    const uint64_t size = live_[addr].first;
    push({snap::Action::kFreeRequested, addr, size, 0, t, snap::kNoStack, 0, tid, false,
          snap::Source::kPytorch});
    push({snap::Action::kFreeCompleted, addr, size, 0, t, snap::kNoStack, 0, tid, false,
          snap::Source::kPytorch});
    live_.erase(addr);
    blocks_.erase(addr);
  }
  // A driver-level allocation of another library (cuBLAS's workspace...), live to the end.
  void library(int64_t t, uint64_t addr, uint64_t size, int32_t stack) {
    push({snap::Action::kSegmentAlloc, addr, size, 0, t, snap::kNoStack, 0, kMainTid});
    push({snap::Action::kAlloc, addr, size, 0, t, stack, 0, kMainTid});
    driver_[addr] = {size, stack};
  }

  void start(int64_t t, const std::string& name) { note(t, name, "START"); }
  void end(int64_t t, const std::string& name) { note(t, name, "END"); }
  void mark(int64_t t, const std::string& name) { note(t, name, "MARK"); }
  // A phase: START at t0, END at t1.
  void phase(int64_t t0, int64_t t1, const std::string& name) {
    start(t0, name);
    end(t1, name);
  }
  void walk(int64_t t, snap::OwnerRole role, std::vector<std::pair<uint64_t, uint64_t>> tensors) {
    s_.tool->ownership.push_back({t, role, std::move(tensors)});
  }
  // The names of a walk's tensors (cumemtrace_modules.py): data pointer -> parameter name.
  void names(int64_t t, snap::OwnerRole role, std::vector<std::pair<uint64_t, std::string>> names) {
    snap::TensorNames n{t, role, {}};
    for (auto& [p, name] : names) n.names.emplace(std::to_string(p), std::move(name));
    s_.tool->tensor_names.push_back(std::move(n));
  }

  // A private pool in use from t (PyTorch's info: kind "cuda_graph" or "mempool").
  void pool_use(int64_t t, const std::string& kind) {
    s_.tool->pytorch->private_pools.push_back({t, kind});
  }

  snap::Snapshot finish() {
    snap::Snapshot out = s_;
    for (const auto& [addr, size] : segments_) {
      snap::Segment g;
      g.address = addr;
      g.total_size = size;
      g.source = snap::Source::kPytorch;
      uint64_t used = 0;
      for (const auto& [a, v] : live_) {
        if (a < addr || a >= addr + size) continue;
        const auto b = blocks_.find(a);
        const uint64_t block = b == blocks_.end() ? v.first : b->second;
        g.blocks.push_back({a, block, v.first, "active_allocated", v.second});
        used += block;
      }
      g.allocated_size = g.active_size = g.requested_size = used;
      if (used < size) g.blocks.push_back({addr + used, size - used, 0, "inactive"});
      out.segments.push_back(g);
    }
    for (const auto& [addr, v] : driver_) {
      snap::Segment g;
      g.address = addr;
      g.total_size = g.allocated_size = g.active_size = g.requested_size = v.first;
      g.stack = v.second;
      g.blocks.push_back({addr, v.first, v.first, "active_allocated", v.second});
      out.segments.push_back(g);
    }
    int64_t end = 0;
    for (const auto& e : out.device_traces[0]) end = std::max(end, e.time_us);
    out.tool->end_time_us = end + 1;
    out.tool->events_total = out.device_traces[0].size();
    return out;
  }

 private:
  void push(snap::TraceEntry e) { s_.device_traces[0].push_back(e); }
  std::map<uint64_t, uint64_t> blocks_;  // alloc_in_block's blocks by address
  void note(int64_t t, const std::string& name, const std::string& stage) {
    s_.annotations.push_back({name, stage, 0, t});
  }

  snap::Snapshot s_;
  std::map<uint64_t, uint64_t> segments_;
  std::map<uint64_t, std::pair<uint64_t, int32_t>> live_;
  std::map<uint64_t, std::pair<uint64_t, int32_t>> driver_;
};

}  // namespace cumemtrace::testing
