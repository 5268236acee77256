// Contract: the preload's settings, read once from the CUMEMTRACE_* variables when the session
// starts (load_config, by the one rule of core/settings_table.h, where each variable and its
// default are described), then read inline by every layer through config(). A bad value gets one
// `cumemtrace:` line and tracing off for the process, never a guess. The bottom of the preload:
// it includes nothing of it but core/log.h.
#pragma once

#include <cstdint>

namespace cumemtrace::preload {

struct Config {
  unsigned stack_depth = 32;
  uint64_t ring_slots = uint64_t{1} << 17;  // 8 MiB
  uint64_t max_wait_ns = 10'000'000'000ull;
  int control_fd = -1;
  // `cumemtrace run`'s rendezvous (CUMEMTRACE_CONTROL_SOCKET): where a process that lost the
  // inherited control fd finds run's collector before it would start one of its own.
  const char* control_socket = nullptr;
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
  // (docs/performance.md, "Walks that stop where the site is known"). Block events made by an
  // autograd node on the engine's thread have that node's frame instead (autograd_node.h). Other
  // block events without Python frames (C++ programs) and every driver event keep their native
  // stack, but for PyTorch's tensors under backend:cudaMallocAsync (pool allocations), whose walk
  // ends at PyTorch's allocator (torch_pool.h), followed by the Python frames or the node's: every
  // allocator mode then gives a tensor the same stack.
  bool torch_native_stacks = false;
  // Each event's time from CLOCK_MONOTONIC_COARSE (CUMEMTRACE_CLOCK=coarse) instead of the TSC
  // (precise, the default): 9 ns instead of 23 a read on the H200 host, at the kernel tick's
  // resolution (1-4 ms). For allocation-bound programs; order comes from the ring either way.
  bool coarse_clock = false;
  // The platform unwinder for every stack instead of the caching one (CUMEMTRACE_SLOW_UNWIND=1).
  bool slow_unwind = false;
};

// The process's one configuration (core/config.cpp; read inline per event).
extern Config g_config;
inline const Config& config() noexcept {
  return g_config;
}

// Fills `c` from the environment. False (after one line saying which variable and why) when a
// value is bad, or when this process is not to be traced (--no-follow and not the root process).
bool load_config(Config& c) noexcept;

}  // namespace cumemtrace::preload
