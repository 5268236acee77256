// Contract: CUMEMTRACE_DEBUG's measure of what recording costs inside the program: the time
// record() spends on an event (its stack, its Python frames, its ring slots), summed over all
// threads, for driver events and for PyTorch block events apart, the latter split by whether
// their stack had Python frames (a thread running Python) or not (autograd's engine thread).
// Whole-process timings cannot resolve a few percent on a real training loop (two bare runs of the
// same loop differ by 3–15% on the GPU host: docs/performance.md); this sum can. Off unless
// CUMEMTRACE_DEBUG is set, when the hot path pays one predictable branch. Events that wait for the
// collector (an OOM, a context's creation or end) are left out: their wait is not recording.
// noexcept, heap-free.
#pragma once

#include <cstdint>

namespace cumemtrace::preload {

enum class MeterClass : int {
  kDriver = 0,
  kTorchBlock = 1,          // with Python frames, or without a stack
  kTorchBlockNoPython = 2,  // with a stack that had no Python frame: the native walk alone
  kCount = 3
};

// Where a stack event's time went (meter_time() units), and how many frames it carried.
struct StackPhases {
  enum : int { kNative, kModules, kPython, kRing, kCount };
  uint64_t ticks[kCount];
  unsigned native_frames;
  unsigned node_frames;  // of the native ones: the autograd node's (autograd_node.h), 0 or 1
  unsigned python_frames;
  // Of the native walk's frames (its skipped leading ones included): taken whole from a memo of
  // the thread's recent walks, and given their rule by the memo's frame at the same place.
  unsigned replayed_frames;
  unsigned memo_frames;
  unsigned python_memo_frames;     // of the Python frames: answered by the thread's memo
  unsigned python_watched_frames;  // of those: without a read of the code object (3.12+)
};

// The session's start, in meter_time() units and in CLOCK_MONOTONIC ns: converts the sums.
void meter_start(uint64_t start_event_time, uint64_t start_monotonic_ns) noexcept;
// One event of `cls` took `ticks` (meter_time() units); `phases`: its stack's, when it had one.
void meter_add(MeterClass cls, uint64_t ticks, const StackPhases* phases) noexcept;
// One line per class that had events: count, mean ns per event, total ms, and the share of the
// time since the session started ("cumemtrace: recording took ..."); for stack events, a second
// line with the mean of each phase: the native stack, the module notes, the Python frames, and
// the ring's slots.
void print_meter() noexcept;

}  // namespace cumemtrace::preload
