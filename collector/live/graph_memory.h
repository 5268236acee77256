// Contract: CUDA graph memory of one traced process (kGraph* records). The allocation and free
// nodes of each graph are kept, in the order they were added; an instantiation copies its graph's
// nodes. A launch applies them in that order: an allocation node makes its address live
// (segment_alloc + alloc, source graph, with the stack of the node's creation:
// cuGraphAddMemAllocNode, or the cuMemAllocAsync that was captured), a free node frees it
// (free_requested + free_completed + segment_free, source graph; a free node of an address not
// live is a free_unknown_pointer anomaly, double_free when it was freed before); an executable
// graph instantiated with AUTO_FREE_ON_LAUNCH first frees what its previous launch left live.
// Graph allocations are device allocations from then on (live/device_allocations.h):
// cuMemFree/cuMemFreeAsync free them, and one that is still live at the end is a leak, as
// compute-sanitizer reports it. Between node creation and launch an address holds no memory and
// is not shown. The driver's graph memory pool (kGraphMemReserved readings) goes to the ledger.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "live/device_allocations.h"
#include "live/device_ledger.h"
#include "live/ring_reader.h"

namespace cumemtrace::collect {

class GraphMemory {
 public:
  GraphMemory(DeviceAllocations& memory, DeviceLedger& ledger) : memory_(memory), ledger_(ledger) {}

  void on_graph(const Record& r, int64_t t, int32_t stack);

 private:
  struct GraphNode {
    bool alloc = true;  // else a free node
    uint64_t addr = 0;
    uint64_t size = 0;
    int device = 0;
    int32_t stack = -1;
    uint8_t api = 0;
  };
  struct GraphExec {
    std::vector<GraphNode> nodes;
    bool auto_free = false;
  };
  void launch(const Record& r, int64_t t);

  DeviceAllocations& memory_;
  DeviceLedger& ledger_;
  std::unordered_map<uint64_t, std::vector<GraphNode>> graphs_;  // by graph
  std::unordered_map<uint64_t, GraphExec> execs_;                // by executable graph
};

}  // namespace cumemtrace::collect
