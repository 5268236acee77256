#include "live/graph_memory.h"

namespace cumemtrace::collect {

using wire::Kind;

void GraphMemory::on_graph(const Record& r, int64_t t, int32_t stack) {
  const auto& ev = r.ev;
  switch (ev.kind) {
    case Kind::kGraphAllocNode:
    case Kind::kGraphFreeNode: {
      const bool alloc = ev.kind == Kind::kGraphAllocNode;
      graphs_[ev.aux].push_back(GraphNode{alloc, ev.addr, alloc ? ev.size : 0,
                                          sane_device(ev.device), stack,
                                          static_cast<uint8_t>(ev.api)});
      break;
    }
    case Kind::kGraphInstantiate: {
      auto g = graphs_.find(ev.aux);
      if (g == graphs_.end() || g->second.empty()) {
        execs_.erase(ev.addr);  // no memory nodes; a reused handle forgets its old graph
        break;
      }
      const bool auto_free = ev.size & 1;  // CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
      execs_[ev.addr] = GraphExec{g->second, auto_free};
      break;
    }
    case Kind::kGraphLaunch:
      launch(r, t);
      break;
    case Kind::kGraphDestroy:
      graphs_.erase(ev.addr);
      break;
    case Kind::kGraphExecDestroy:
      execs_.erase(ev.addr);
      break;
    case Kind::kGraphMemReserved:
      ledger_.graph_pool_reading(ev.device, ev.size);
      break;
    default:
      break;
  }
}

void GraphMemory::launch(const Record& r, int64_t t) {
  const auto& ev = r.ev;
  auto it = execs_.find(ev.addr);
  if (it == execs_.end()) return;  // a graph without memory nodes
  const GraphExec& exec = it->second;
  const bool pt = ev.flags & wire::kFlagPerThreadStream;
  if (exec.auto_free) {  // the driver frees what the previous launch left, before relaunching
    for (const GraphNode& n : exec.nodes) {
      if (n.alloc && memory_.is_live_graph(n.addr))
        memory_.free_by_graph(n.addr, ev.stream, t, ev.tid, pt);
    }
  }
  for (const GraphNode& n : exec.nodes) {
    if (!n.alloc) {
      if (!memory_.free_by_graph(n.addr, ev.stream, t, ev.tid, pt)) {
        const char* kind = memory_.was_freed(n.addr) ? "double_free" : "free_unknown_pointer";
        memory_.anomaly(kind, n.addr, n.api, ev.tid, t, n.stack);
      }
      continue;
    }
    if (memory_.is_live(n.addr)) continue;  // still live: the driver refuses such a launch
    memory_.add_graph_allocation(
        n.addr, DeviceAllocations::Live{n.size, n.device, ev.stream, n.stack, t, n.api, pt},
        ev.tid);
  }
}

}  // namespace cumemtrace::collect
