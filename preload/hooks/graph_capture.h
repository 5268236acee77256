// Contract: what the allocation hooks need to know about CUDA graphs. While no stream capture is
// in progress anywhere in the process (the common case), in_capture() is one relaxed atomic load
// and says no; otherwise it asks the driver whether the call's stream is capturing and into
// which graph. A stream-ordered allocation or free made on a capturing stream creates a graph
// node instead of memory, so the hooks then record kGraphAllocNode / kGraphFreeNode (see
// wire_format.h) rather than an allocation or a free. The count of captures in progress is kept
// by the cuStreamBeginCapture* / cuStreamEndCapture hooks (hooks_graph.cpp).
#pragma once

#include <atomic>
#include <cstdint>

namespace cumemtrace::preload {

extern std::atomic<int> g_captures_in_progress;

// The graph `stream` is capturing into, 0 when it is not capturing.
uint64_t capture_graph_slow(uint64_t stream, bool per_thread) noexcept;

inline uint64_t capture_graph(uint64_t stream, bool per_thread) noexcept {
  if (g_captures_in_progress.load(std::memory_order_relaxed) <= 0) return 0;
  return capture_graph_slow(stream, per_thread);
}

// Records a graph allocation node (after the driver created it) or free node.
void record_graph_alloc_node(uint8_t api, uint64_t graph, uint64_t addr, uint64_t size,
                             int device) noexcept;
void record_graph_free_node(uint8_t api, uint64_t graph, uint64_t addr) noexcept;

}  // namespace cumemtrace::preload
