// CUDA graph memory in the event model: nodes hold no memory until their graph is launched; a
// launch applies them in order; graph allocations are freed by free nodes, cuMemFree or an
// auto-free relaunch, and a launched allocation nobody freed stays live (a leak).
#include <catch2/catch.hpp>

#include "live/trace_model.h"

using namespace cumemtrace;
using snap::Action;
using wire::Api;
using wire::Kind;

namespace {

struct GraphFeeder {
  collect::TraceModel model{1'700'000'000'000'000'000ull, 1'000'000'000ull, 0};
  collect::Symbolizer sym;
  uint64_t clock = 1'000'000'000ull;

  void add(Kind k, Api api, uint64_t addr, uint64_t size, uint64_t aux = 0, int device = 0,
           std::vector<uint64_t> frames = {}) {
    collect::Record r;
    r.ev.kind = k;
    r.ev.api = api;
    r.ev.addr = addr;
    r.ev.size = size;
    r.ev.aux = aux;
    r.ev.device = static_cast<int16_t>(device);
    r.ev.tid = 7;
    r.ev.time_ns = clock += 1000;
    r.frames = std::move(frames);
    model.add(r);
  }
  snap::Snapshot build() {
    return model.build(collect::ProcessInfo{7, 1, "/bin/app", {}, {}, "h"}, sym);
  }
};

constexpr uint64_t kGraph = 0x6000, kExec = 0x7000;

std::vector<Action> actions(const snap::Snapshot& s) {
  std::vector<Action> out;
  for (const auto& e : s.device_traces.at(0)) out.push_back(e.action);
  return out;
}

}  // namespace

TEST_CASE("graph allocation nodes become memory at launch, with the node's stack") {
  GraphFeeder f;
  f.add(Kind::kGraphAllocNode, Api::kGraphAddMemAllocNode, 0xa000, 4096, kGraph, 0, {0x11, 0x22});
  f.add(Kind::kGraphAllocNode, Api::kMemAllocAsync, 0xb000, 512, kGraph, 0, {0x33});
  f.add(Kind::kGraphFreeNode, Api::kMemFreeAsync, 0xb000, 0, kGraph);
  f.add(Kind::kGraphInstantiate, Api::kGraphInstantiate, kExec, 0, kGraph);
  {
    auto s = f.build();  // instantiated, not launched: nothing is live
    REQUIRE(s.segments.empty());
    REQUIRE(s.tool->devices.empty());
  }
  f.add(Kind::kGraphLaunch, Api::kGraphLaunch, kExec, 0, 0, 0, {0x99});
  auto s = f.build();
  REQUIRE(actions(s) == std::vector<Action>{Action::kSegmentAlloc, Action::kAlloc,
                                            Action::kSegmentAlloc, Action::kAlloc,
                                            Action::kFreeRequested, Action::kFreeCompleted,
                                            Action::kSegmentFree});
  for (const auto& e : s.device_traces[0]) REQUIRE(e.source == snap::Source::kGraph);
  REQUIRE(s.segments.size() == 1);
  REQUIRE(s.segments[0].address == 0xa000);
  REQUIRE(s.segments[0].total_size == 4096);
  REQUIRE(s.segments[0].source == snap::Source::kGraph);
  // The stack is where the node was made, not where the graph was launched.
  REQUIRE(s.stacks.at(static_cast<size_t>(s.segments[0].stack)).size() == 2);
  REQUIRE(s.tool->devices[0].live_bytes == 4096);
  REQUIRE(s.tool->devices[0].peak_bytes == 4096 + 512);
  REQUIRE(s.tool->devices[0].allocations == 2);
  REQUIRE(s.tool->devices[0].frees == 1);
  REQUIRE(s.tool->anomalies.empty());
}

TEST_CASE("a graph allocation freed outside any graph is no anomaly, and the reverse") {
  GraphFeeder f;
  // Graph A allocates, graph B frees (a free node of memory A made); then A again and cuMemFree.
  f.add(Kind::kGraphAllocNode, Api::kGraphAddMemAllocNode, 0xa000, 1000, 0x1);
  f.add(Kind::kGraphFreeNode, Api::kGraphAddMemFreeNode, 0xa000, 0, 0x2);
  f.add(Kind::kGraphInstantiate, Api::kGraphInstantiate, 0x11, 0, 0x1);
  f.add(Kind::kGraphInstantiate, Api::kGraphInstantiate, 0x22, 0, 0x2);
  f.add(Kind::kGraphLaunch, Api::kGraphLaunch, 0x11, 0);
  f.add(Kind::kGraphLaunch, Api::kGraphLaunch, 0x22, 0);
  f.add(Kind::kGraphLaunch, Api::kGraphLaunch, 0x11, 0);
  f.add(Kind::kFree, Api::kMemFree, 0xa000, 0);
  auto s = f.build();
  REQUIRE(s.tool->anomalies.empty());
  REQUIRE(s.segments.empty());
  REQUIRE(s.tool->devices[0].allocations == 2);
  REQUIRE(s.tool->devices[0].frees == 2);
  REQUIRE(s.tool->devices[0].live_bytes == 0);
  // The free through cuMemFree is a graph allocation's free.
  REQUIRE(s.device_traces[0].back().action == Action::kSegmentFree);
  REQUIRE(s.device_traces[0].back().source == snap::Source::kGraph);
}

TEST_CASE("auto-free-on-launch frees the previous launch's allocation; destroy keeps it live") {
  GraphFeeder f;
  f.add(Kind::kGraphAllocNode, Api::kGraphAddMemAllocNode, 0xa000, 300, kGraph);
  f.add(Kind::kGraphInstantiate, Api::kGraphInstantiate, kExec, 1, kGraph);  // AUTO_FREE
  f.add(Kind::kGraphLaunch, Api::kGraphLaunch, kExec, 0);
  f.add(Kind::kGraphLaunch, Api::kGraphLaunch, kExec, 0);
  f.add(Kind::kGraphLaunch, Api::kGraphLaunch, kExec, 0);
  f.add(Kind::kGraphExecDestroy, Api::kGraphExecDestroy, kExec, 0);
  f.add(Kind::kGraphDestroy, Api::kGraphDestroy, kGraph, 0);
  // A launch of the destroyed handle does nothing (a graph without memory nodes by then).
  f.add(Kind::kGraphLaunch, Api::kGraphLaunch, kExec, 0);
  auto s = f.build();
  REQUIRE(s.tool->devices[0].allocations == 3);
  REQUIRE(s.tool->devices[0].frees == 2);
  REQUIRE(s.tool->devices[0].live_bytes == 300);
  REQUIRE(s.tool->devices[0].peak_bytes == 300);
  REQUIRE(s.segments.size() == 1);
  REQUIRE(s.tool->anomalies.empty());
}

TEST_CASE("a free node of memory that is not live is an anomaly at launch") {
  GraphFeeder f;
  f.add(Kind::kGraphFreeNode, Api::kGraphAddMemFreeNode, 0xdead, 0, kGraph);
  f.add(Kind::kGraphInstantiate, Api::kGraphInstantiate, kExec, 0, kGraph);
  REQUIRE(f.build().tool->anomalies.empty());  // a node alone frees nothing yet
  f.add(Kind::kGraphLaunch, Api::kGraphLaunch, kExec, 0);
  auto s = f.build();
  REQUIRE(s.tool->anomalies.size() == 1);
  REQUIRE(s.tool->anomalies[0].kind == "free_unknown_pointer");
  REQUIRE(s.tool->anomalies[0].addr == 0xdead);
  REQUIRE(s.tool->anomalies[0].api == "cuGraphAddMemFreeNode");
}

TEST_CASE("nodes added after instantiation are not in the executable graph") {
  GraphFeeder f;
  f.add(Kind::kGraphAllocNode, Api::kGraphAddMemAllocNode, 0xa000, 100, kGraph);
  f.add(Kind::kGraphInstantiate, Api::kGraphInstantiate, kExec, 0, kGraph);
  f.add(Kind::kGraphAllocNode, Api::kGraphAddMemAllocNode, 0xb000, 200, kGraph);
  f.add(Kind::kGraphLaunch, Api::kGraphLaunch, kExec, 0);
  auto s = f.build();
  REQUIRE(s.segments.size() == 1);
  REQUIRE(s.tool->devices[0].live_bytes == 100);
}

TEST_CASE("graph memory readings keep the latest and the highest reserved bytes") {
  GraphFeeder f;
  f.add(Kind::kGraphMemReserved, Api::kGraphLaunch, 0, 64 << 20, 32 << 20, 1);
  f.add(Kind::kGraphMemReserved, Api::kDeviceGraphMemTrim, 0, 0, 0, 1);
  f.add(Kind::kGraphMemReserved, Api::kGraphLaunch, 0, 2 << 20, 1 << 20, 1);
  auto s = f.build();
  REQUIRE(s.tool->devices.size() == 2);
  REQUIRE(s.tool->devices[1].graph_reserved_bytes == (2u << 20));
  REQUIRE(s.tool->devices[1].graph_reserved_peak_bytes == (64u << 20));
  REQUIRE(s.tool->devices[1].live_bytes == 0);
}
