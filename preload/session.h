// Contract: one tracing session per process image: configuration from CUMEMTRACE_* variables,
// the ring memfd, the collector connection (inherited control socket, or a collector started
// here) and the process hooks (on_exit, fork). start() runs once, on the first event; it is not
// async-signal-safe and must not be called from a hook's re-entered path. After fork the child
// starts over lazily with a session of its own.
#pragma once

#include <atomic>
#include <cstdint>

#include "ring_producer.h"

namespace cumemtrace::preload {

struct Config {
  unsigned stack_depth = 32;
  uint64_t ring_slots = uint64_t{1} << 17;  // 8 MiB
  uint64_t max_wait_ns = 10'000'000'000ull;
  int control_fd = -1;
  const char* output = nullptr;
  const char* collector = nullptr;
  bool debug = false;
  bool follow = true;         // trace forked/exec'd children too
  bool python_stacks = true;  // add the allocating thread's Python frames (python_stack.h)
  // Keep the native frames above CPython's evaluation loop when Python frames are recorded
  // (CUMEMTRACE_NATIVE_ABOVE_PYTHON=1): by default a stack stops at the loop's innermost frame.
  bool native_above_python = false;
  // Stacks for releases too (CUMEMTRACE_FREE_STACKS=1): frees, unmaps and PyTorch's free
  // requests. Off by default, as in memray, heaptrack and PyTorch's context="alloc": the question
  // is who holds memory, which the allocation's stack answers, and a release's walk costs as much
  // as an allocation's (a third of a training step's block events are free requests).
  bool free_stacks = false;
  // Native frames for PyTorch's block events on a thread with Python frames
  // (CUMEMTRACE_TORCH_NATIVE_STACKS=1). Off by default, like PyTorch's own stacks="python" and
  // memray without --native: a tensor's site is its innermost Python frame either way
  // (collector/analysis/frames.h), and the native part of such a stack is the caching allocator
  // and the op dispatcher below that line, which cost three quarters of a block event's recording
  // (docs/performance.md, ninth round). Block events made by an autograd node on the engine's
  // thread have that node's frame instead (autograd_node.h). Other block events without Python
  // frames (C++ programs) and every driver event keep their native stack, but for PyTorch's tensors
  // under backend:cudaMallocAsync (pool allocations), whose walk ends at PyTorch's allocator
  // (torch_pool.h), followed by the Python frames or the node's: every allocator mode then gives
  // a tensor the same stack.
  bool torch_native_stacks = false;
  // Each event's time from CLOCK_MONOTONIC_COARSE (CUMEMTRACE_CLOCK=coarse) instead of the TSC
  // (precise, the default): 9 ns instead of 23 a read on the H200 host, at the kernel tick's
  // resolution (1-4 ms). For allocation-bound programs; order comes from the ring either way.
  bool coarse_clock = false;
};

// States below kOff may record (tracing_possible()). kPaused: a running session whose hooks
// record nothing for now, only ever set by cumemtrace_bench_pause_recording (a benchmark's
// in-process A/B); everything else treats it as not running.
enum class SessionState : int { kIdle = 0, kStarting = 1, kRunning = 2, kOff = 3, kPaused = 4 };

// The process's one configuration and ring (defined in session.cpp; read inline per event).
extern Config g_config;
extern RingProducer g_ring;
inline const Config& config() noexcept {
  return g_config;
}
inline RingProducer& ring() noexcept {
  return g_ring;
}

// The session's state (a SessionState); read inline on every event, written by session.cpp.
extern std::atomic<int> g_session_state;

// Starts the session if it is idle; returns true when events can be recorded.
bool ensure_session_slow() noexcept;
inline bool ensure_session() noexcept {
  return g_session_state.load(std::memory_order_acquire) ==
             static_cast<int>(SessionState::kRunning) ||
         ensure_session_slow();
}
inline SessionState session_state() noexcept {
  return static_cast<SessionState>(g_session_state.load(std::memory_order_acquire));
}

// Prints "cumemtrace: <msg>" on stderr with one write(2).
void print_line(const char* msg, const char* detail = nullptr) noexcept;

}  // namespace cumemtrace::preload
