// The CUDA graph hooks: graph memory nodes (added directly or by stream-ordered allocation calls
// on a capturing stream), instantiation, launch and destruction, and the stream-capture calls
// whose count lets the allocation hooks skip the capture query while nothing is captured. Graph
// calls are not on an allocation hot path; each records one event after the real call succeeded
// (destructions before it, as the handle may be reused as soon as it is gone). The collector
// turns nodes into memory at launch (wire_format.h, kGraphAllocNode...).
#include <cuda.h>

#include <atomic>

#include "core/export.h"
#include "driver/real_driver.h"
#include "hooks/graph_capture.h"
#include "hooks/hook_table.h"
#include "record/recorder.h"

// cuda.h maps these base names to other ABIs; the hooks below are the exact ABIs.
#undef cuStreamBeginCapture
#undef cuStreamBeginCapture_ptsz
#undef cuStreamEndCapture
#undef cuStreamBeginCaptureToGraph
#undef cuGraphInstantiateWithParams
#undef cuGraphLaunch
#undef cuGraphAddNode
#undef cuGraphInstantiate

using cumemtrace::preload::EventArgs;
using cumemtrace::preload::HookId;
using cumemtrace::preload::real_fn;
using cumemtrace::preload::ReentryGuard;
using cumemtrace::preload::u64;
using cumemtrace::wire::Api;
using cumemtrace::wire::Kind;
namespace pl = cumemtrace::preload;

// The _ptsz declarations cuda.h makes only for the driver's own build.
extern "C" {
CUresult cuStreamBeginCapture(CUstream hStream);
CUresult cuStreamBeginCapture_ptsz(CUstream hStream);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                          const CUgraphNode* dependencies,
                                          const CUgraphEdgeData* dependencyData,
                                          size_t numDependencies, CUstreamCaptureMode mode);
CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph* phGraph);
CUresult cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                           CUDA_GRAPH_INSTANTIATE_PARAMS* instantiateParams);
CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream);
CUresult cuGraphAddNode(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                        size_t numDependencies, CUgraphNodeParams* nodeParams);
CUresult cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                            char* logBuffer, size_t bufferSize);
CUresult cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                               char* logBuffer, size_t bufferSize);
}

namespace cumemtrace::preload {

std::atomic<int> g_captures_in_progress{0};

namespace {

// Graph memory readings are taken only once the process has made a graph memory node, and
// recorded only when they changed (per device, the last values recorded).
std::atomic<bool> g_graph_memory_seen{false};
constexpr int kMaxGraphDevices = 64;
std::atomic<uint64_t> g_last_reserved[kMaxGraphDevices];
std::atomic<uint64_t> g_last_used[kMaxGraphDevices];

void record_kind(Kind kind, Api api, uint64_t addr, uint64_t aux, uint64_t size = 0,
                 uint64_t stream = 0, uint8_t flags = 0) noexcept {
  EventArgs a{kind, api};
  a.addr = addr;
  a.aux = aux;
  a.size = size;
  a.stream = stream;
  a.flags = flags;
  record(a);
}

void note_graph_memory(int device, Api api) noexcept {
  if (!g_graph_memory_seen.load(std::memory_order_relaxed)) return;
  if (device < 0 || device >= kMaxGraphDevices) return;
  uint64_t reserved = 0, used = 0;
  if (!graph_mem(device, &reserved, &used)) return;
  if (g_last_reserved[device].exchange(reserved, std::memory_order_relaxed) == reserved &&
      g_last_used[device].exchange(used, std::memory_order_relaxed) == used) {
    return;
  }
  g_last_used[device].store(used, std::memory_order_relaxed);
  EventArgs a{Kind::kGraphMemReserved, api};
  a.device = device;
  a.size = reserved;
  a.aux = used;
  record(a);
}

int pool_device(const CUmemPoolProps& props) {
  return props.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? props.location.id : -1;
}

constexpr uint8_t kPtsz = wire::kFlagPerThreadStream;

CUresult begin_capture_done(CUresult r) noexcept {
  if (r == CUDA_SUCCESS) g_captures_in_progress.fetch_add(1, std::memory_order_relaxed);
  return r;
}

CUresult end_capture(HookId id, bool per_thread, CUstream s, CUgraph* graph) noexcept {
  auto fn = real_fn<CUresult (*)(CUstream, CUgraph*)>(id);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  // A capture ended when the stream captured before the call and no longer does after it (the
  // driver refuses some calls without ending the capture: ask it rather than guess).
  const bool was_capturing = stream_capturing(u64(s), per_thread);
  CUresult r = fn(s, graph);
  if (was_capturing && !stream_capturing(u64(s), per_thread)) {
    int n = g_captures_in_progress.load(std::memory_order_relaxed);
    while (n > 0 &&
           !g_captures_in_progress.compare_exchange_weak(n, n - 1, std::memory_order_relaxed)) {
    }
  }
  return r;
}

CUresult instantiated(CUresult r, bool outer, CUgraphExec* exec, CUgraph graph,
                      uint64_t flags) noexcept {
  if (outer && r == CUDA_SUCCESS && exec && tracing_possible()) {
    record_kind(Kind::kGraphInstantiate, Api::kGraphInstantiate, u64(*exec), u64(graph), flags);
    // An instantiation with CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD reserves the graph's memory now.
    note_graph_memory(current_device(), Api::kGraphInstantiate);
  }
  return r;
}

CUresult launch(HookId id, uint8_t flags, CUgraphExec exec, CUstream s) noexcept {
  auto fn = real_fn<CUresult (*)(CUgraphExec, CUstream)>(id);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(exec, s);
  if (g.outer && r == CUDA_SUCCESS && tracing_possible()) {
    record_kind(Kind::kGraphLaunch, Api::kGraphLaunch, u64(exec), 0, 0, u64(s), flags);
    note_graph_memory(current_device(), Api::kGraphLaunch);
  }
  return r;
}

}  // namespace

uint64_t capture_graph_slow(uint64_t stream, bool per_thread) noexcept {
  return capturing_graph(stream, per_thread);
}

void record_graph_alloc_node(uint8_t api, uint64_t graph, uint64_t addr, uint64_t size,
                             int device) noexcept {
  g_graph_memory_seen.store(true, std::memory_order_relaxed);
  EventArgs a{Kind::kGraphAllocNode, static_cast<Api>(api)};
  a.addr = addr;
  a.size = size;
  a.aux = graph;
  a.device = device;
  record(a);
}

void record_graph_free_node(uint8_t api, uint64_t graph, uint64_t addr) noexcept {
  record_kind(Kind::kGraphFreeNode, static_cast<Api>(api), addr, graph);
}

}  // namespace cumemtrace::preload

CUMEMTRACE_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph,
                                                  const CUgraphNode* deps, size_t ndeps,
                                                  CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  auto fn =
      pl::real_fn<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                               CUDA_MEM_ALLOC_NODE_PARAMS*)>(HookId::k_cuGraphAddMemAllocNode);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(node, graph, deps, ndeps, params);
  if (g.outer && r == CUDA_SUCCESS && params && pl::tracing_possible()) {
    pl::record_graph_alloc_node(static_cast<uint8_t>(Api::kGraphAddMemAllocNode), pl::u64(graph),
                                params->dptr, params->bytesize, pl::pool_device(params->poolProps));
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph,
                                                 const CUgraphNode* deps, size_t ndeps,
                                                 CUdeviceptr dptr) {
  auto fn =
      pl::real_fn<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t, CUdeviceptr)>(
          HookId::k_cuGraphAddMemFreeNode);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(node, graph, deps, ndeps, dptr);
  if (g.outer && r == CUDA_SUCCESS && pl::tracing_possible()) {
    pl::record_graph_free_node(static_cast<uint8_t>(Api::kGraphAddMemFreeNode), pl::u64(graph),
                               dptr);
  }
  return r;
}

namespace {

// cuGraphAddNode[_v2] with memory node parameters is the same as the dedicated calls.
void added_node(CUresult r, bool outer, CUgraph graph, const CUgraphNodeParams* p) noexcept {
  if (!outer || r != CUDA_SUCCESS || !p || !pl::tracing_possible()) return;
  if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
    pl::record_graph_alloc_node(static_cast<uint8_t>(Api::kGraphAddNode), pl::u64(graph),
                                p->alloc.dptr, p->alloc.bytesize,
                                pl::pool_device(p->alloc.poolProps));
  } else if (p->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
    pl::record_graph_free_node(static_cast<uint8_t>(Api::kGraphAddNode), pl::u64(graph),
                               p->free.dptr);
  }
}

}  // namespace

CUMEMTRACE_EXPORT CUresult cuGraphAddNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                          size_t ndeps, CUgraphNodeParams* params) {
  auto fn = pl::real_fn<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, size_t,
                                     CUgraphNodeParams*)>(HookId::k_cuGraphAddNode);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(node, graph, deps, ndeps, params);
  added_node(r, g.outer, graph, params);
  return r;
}

CUMEMTRACE_EXPORT CUresult cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph,
                                             const CUgraphNode* deps, const CUgraphEdgeData* edges,
                                             size_t ndeps, CUgraphNodeParams* params) {
  auto fn =
      pl::real_fn<CUresult (*)(CUgraphNode*, CUgraph, const CUgraphNode*, const CUgraphEdgeData*,
                               size_t, CUgraphNodeParams*)>(HookId::k_cuGraphAddNode_v2);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(node, graph, deps, edges, ndeps, params);
  added_node(r, g.outer, graph, params);
  return r;
}

CUMEMTRACE_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec* exec, CUgraph graph,
                                                       unsigned long long flags) {
  auto fn = pl::real_fn<CUresult (*)(CUgraphExec*, CUgraph, unsigned long long)>(
      HookId::k_cuGraphInstantiateWithFlags);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  return pl::instantiated(fn(exec, graph, flags), g.outer, exec, graph, flags);
}

// The CUDA 10-11 forms (no flags), which cudart still asks for by name.
CUMEMTRACE_EXPORT CUresult cuGraphInstantiate(CUgraphExec* exec, CUgraph graph,
                                              CUgraphNode* error_node, char* log, size_t log_size) {
  auto fn = pl::real_fn<CUresult (*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t)>(
      HookId::k_cuGraphInstantiate);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  return pl::instantiated(fn(exec, graph, error_node, log, log_size), g.outer, exec, graph, 0);
}

CUMEMTRACE_EXPORT CUresult cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph,
                                                 CUgraphNode* error_node, char* log,
                                                 size_t log_size) {
  auto fn = pl::real_fn<CUresult (*)(CUgraphExec*, CUgraph, CUgraphNode*, char*, size_t)>(
      HookId::k_cuGraphInstantiate_v2);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  return pl::instantiated(fn(exec, graph, error_node, log, log_size), g.outer, exec, graph, 0);
}

CUMEMTRACE_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec* exec, CUgraph graph,
                                                        CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  auto fn = pl::real_fn<CUresult (*)(CUgraphExec*, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS*)>(
      HookId::k_cuGraphInstantiateWithParams);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  return pl::instantiated(fn(exec, graph, params), g.outer, exec, graph,
                          params ? params->flags : 0);
}

CUMEMTRACE_EXPORT CUresult cuGraphInstantiateWithParams_ptsz(
    CUgraphExec* exec, CUgraph graph, CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  auto fn = pl::real_fn<CUresult (*)(CUgraphExec*, CUgraph, CUDA_GRAPH_INSTANTIATE_PARAMS*)>(
      HookId::k_cuGraphInstantiateWithParams_ptsz);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  return pl::instantiated(fn(exec, graph, params), g.outer, exec, graph,
                          params ? params->flags : 0);
}

CUMEMTRACE_EXPORT CUresult cuGraphLaunch(CUgraphExec exec, CUstream s) {
  return pl::launch(HookId::k_cuGraphLaunch, 0, exec, s);
}

CUMEMTRACE_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s) {
  return pl::launch(HookId::k_cuGraphLaunch_ptsz, pl::kPtsz, exec, s);
}

CUMEMTRACE_EXPORT CUresult cuGraphDestroy(CUgraph graph) {
  auto fn = pl::real_fn<CUresult (*)(CUgraph)>(HookId::k_cuGraphDestroy);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  if (g.outer && graph && pl::tracing_possible()) {
    pl::record_kind(Kind::kGraphDestroy, Api::kGraphDestroy, pl::u64(graph), 0);
  }
  return fn(graph);
}

CUMEMTRACE_EXPORT CUresult cuGraphExecDestroy(CUgraphExec exec) {
  auto fn = pl::real_fn<CUresult (*)(CUgraphExec)>(HookId::k_cuGraphExecDestroy);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  if (g.outer && exec && pl::tracing_possible()) {
    pl::record_kind(Kind::kGraphExecDestroy, Api::kGraphExecDestroy, pl::u64(exec), 0);
  }
  return fn(exec);
}

CUMEMTRACE_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice device) {
  auto fn = pl::real_fn<CUresult (*)(CUdevice)>(HookId::k_cuDeviceGraphMemTrim);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  ReentryGuard g;
  CUresult r = fn(device);
  if (g.outer && r == CUDA_SUCCESS && pl::tracing_possible()) {
    pl::note_graph_memory(device, Api::kDeviceGraphMemTrim);
  }
  return r;
}

CUMEMTRACE_EXPORT CUresult cuStreamBeginCapture(CUstream s) {
  auto fn = pl::real_fn<CUresult (*)(CUstream)>(HookId::k_cuStreamBeginCapture);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  return pl::begin_capture_done(fn(s));
}

CUMEMTRACE_EXPORT CUresult cuStreamBeginCapture_ptsz(CUstream s) {
  auto fn = pl::real_fn<CUresult (*)(CUstream)>(HookId::k_cuStreamBeginCapture_ptsz);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  return pl::begin_capture_done(fn(s));
}

CUMEMTRACE_EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  auto fn =
      pl::real_fn<CUresult (*)(CUstream, CUstreamCaptureMode)>(HookId::k_cuStreamBeginCapture_v2);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  return pl::begin_capture_done(fn(s, mode));
}

CUMEMTRACE_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  auto fn = pl::real_fn<CUresult (*)(CUstream, CUstreamCaptureMode)>(
      HookId::k_cuStreamBeginCapture_v2_ptsz);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  return pl::begin_capture_done(fn(s, mode));
}

CUMEMTRACE_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph graph,
                                                       const CUgraphNode* deps,
                                                       const CUgraphEdgeData* edges, size_t ndeps,
                                                       CUstreamCaptureMode mode) {
  auto fn =
      pl::real_fn<CUresult (*)(CUstream, CUgraph, const CUgraphNode*, const CUgraphEdgeData*,
                               size_t, CUstreamCaptureMode)>(HookId::k_cuStreamBeginCaptureToGraph);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  return pl::begin_capture_done(fn(s, graph, deps, edges, ndeps, mode));
}

CUMEMTRACE_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph graph,
                                                            const CUgraphNode* deps,
                                                            const CUgraphEdgeData* edges,
                                                            size_t ndeps,
                                                            CUstreamCaptureMode mode) {
  auto fn = pl::real_fn<CUresult (*)(CUstream, CUgraph, const CUgraphNode*, const CUgraphEdgeData*,
                                     size_t, CUstreamCaptureMode)>(
      HookId::k_cuStreamBeginCaptureToGraph_ptsz);
  if (!fn) return CUDA_ERROR_NOT_INITIALIZED;
  return pl::begin_capture_done(fn(s, graph, deps, edges, ndeps, mode));
}

CUMEMTRACE_EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph* graph) {
  return pl::end_capture(HookId::k_cuStreamEndCapture, false, s, graph);
}

CUMEMTRACE_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* graph) {
  return pl::end_capture(HookId::k_cuStreamEndCapture_ptsz, true, s, graph);
}
