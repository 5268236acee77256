// Contract: what the hooks call to record an event. Every function here is noexcept, allocates
// nothing and takes no lock on the hot path. The first event starts the session (ring, collector
// connection) lazily; when starting fails, tracing turns off with one `cumemtrace:` line and every
// later call returns at once. Hooks wrap their body in a ReentryGuard and record only when it is
// the outermost one, so a driver call made from inside a hook is never recorded twice.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/emitter.h"
#include "core/event_clock.h"
#include "stacks/cfi_unwinder.h"
#include "wire/wire_format.h"

namespace cumemtrace::preload {

// constinit: no TLS wrapper call on every hook (the variable has no dynamic initializer).
extern thread_local constinit int t_hook_depth __attribute__((tls_model("initial-exec")));

struct ReentryGuard {
  bool outer;
  ReentryGuard() noexcept : outer(t_hook_depth++ == 0) {}
  ~ReentryGuard() { --t_hook_depth; }
  ReentryGuard(const ReentryGuard&) = delete;
  ReentryGuard& operator=(const ReentryGuard&) = delete;
};

// An event as a hook asks for it: its fields, and how it is to be recorded.
struct EventArgs : EventFields {
  // The event's time when the hook read it (event_time(), nonzero: the pool sampler's interval
  // was compared against it, pool_sampler.h); 0: the clock is read when the record is written.
  uint64_t time = 0;
  // False: recorded without a stack even when stacks are on, because the collector gives the
  // event a stack an earlier record of the same memory already carries (a PyTorch FREE_COMPLETED
  // takes its FREE_REQUESTED's: collector/live/trace_model.h).
  bool stack = true;
  // Where the stack walk starts (cfi_unwinder.h): the hook's own frame, captured by the hook with
  // cfi::walk_start_here(). Unset: the recorder starts it at its own frame.
  cfi::WalkStart walk_start{};
};

// A driver handle or pointer as the 64-bit value an event carries.
inline uint64_t u64(const void* p) noexcept {
  return reinterpret_cast<uint64_t>(p);
}

// Called in a forked child: its session announces its devices (kDevice) again.
void forget_devices() noexcept;

// Sets g_plain_kinds from the configuration: called by the session before it runs.
void set_plain_kinds() noexcept;

// CUDA ordinals already announced with their PCI bus id (kDevice), one bit each.
extern std::atomic<uint64_t> g_devices_announced;
// The kinds that are written without a stack and without waiting for the collector, one bit per
// wire::Kind: a function of the configuration (recorder.cpp: the policy of each kind), set before
// the session runs; 0 under CUMEMTRACE_DEBUG, whose meter times every record. Never kTorchBlock
// (whether one takes a stack depends on its action) nor kExit.
extern std::atomic<uint64_t> g_plain_kinds;

// Records one event with the caller's stack (when stacks are on): the hooks' entry point. The
// first record of a thread or of a device announces it; an OOM and a context's creation or end
// return once the collector consumed the record (at most 5 s).
void record(const EventArgs& a) noexcept;

// record() of an event with these fields (its time `time`, 0: read when written), inlined into the
// hook: when the event takes no stack, it is written straight into its slot. That is the hot path
// of a stack-less allocation and of every free (frees take no stack by default). On a
// cudaMallocAsync pool hit (about 1 us a pair) record()'s call, its EventArgs and its checks were a
// third of the instructions recording added (docs/performance.md, "The event written from the
// hook"); an EventArgs built in the hook's frame on every event cost a 96-byte clear. Four loads
// decide; anything else goes record()'s way: the thread's first record, a device not yet
// announced, a session not running, stacks, the meter.
__attribute__((always_inline)) inline void record_fields(const EventFields& f,
                                                         uint64_t time = 0) noexcept {
  const uint32_t tid = t_tid;
  if (tid &&
      g_session_state.load(std::memory_order_acquire) == static_cast<int>(SessionState::kRunning) &&
      (g_plain_kinds.load(std::memory_order_relaxed) >> static_cast<unsigned>(f.kind) & 1) &&
      (f.device < 0 ||
       (f.device < 64 && (g_devices_announced.load(std::memory_order_relaxed) >> f.device & 1)))) {
    emit(f, tid, time, nullptr, 0, 0, 0, nullptr);
    return;
  }
  EventArgs a{f};
  a.time = time;
  record(a);
}

}  // namespace cumemtrace::preload
