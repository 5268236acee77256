// Contract: what the hooks call to record an event. Every function here is noexcept, allocates
// nothing and takes no lock on the hot path. The first event starts the session (ring, collector
// connection) lazily; when starting fails, tracing turns off with one `cumemtrace:` line and every
// later call returns at once. Hooks wrap their body in a ReentryGuard and record only when it is
// the outermost one, so a driver call made from inside a hook is never recorded twice.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cfi_unwinder.h"
#include "session.h"
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

struct EventArgs {
  wire::Kind kind;
  wire::Api api = wire::Api::kNone;
  int32_t result = 0;
  uint64_t addr = 0;
  uint64_t size = 0;
  int device = -1;
  uint64_t stream = 0;
  uint64_t aux = 0;
  uint8_t flags = 0;
  // False: recorded without a stack even when stacks are on, because the collector gives the
  // event a stack an earlier record of the same memory already carries (a PyTorch FREE_COMPLETED
  // takes its FREE_REQUESTED's: collector/live/trace_model.h).
  bool stack = true;
  // Where the stack walk starts (cfi_unwinder.h): the hook's own frame, captured by the hook with
  // cfi::walk_start_here(). Unset: record() starts it at its own frame.
  cfi::WalkStart walk_start{};
};

// A driver handle or pointer as the 64-bit value an event carries.
inline uint64_t u64(const void* p) noexcept {
  return reinterpret_cast<uint64_t>(p);
}

// False once tracing is known to be off (disabled, failed, or AT_SECURE) or while a benchmark
// has paused it: hooks may then skip the work of preparing an event. One compare (session.h).
inline bool tracing_possible() noexcept {
  return static_cast<int>(session_state()) < static_cast<int>(SessionState::kOff);
}

// Called in a forked child: the calling thread's cached id belongs to the parent.
void forget_thread_cache() noexcept;
// Called in a forked child: its session announces its devices (kDevice) again.
void forget_devices() noexcept;

// Records one event with the caller's stack (when stacks are on). An OOM and a context's
// creation or end return once the collector consumed the record (at most 5 s).
void record(const EventArgs& a) noexcept;
// The same, with the event's time already read by the hook (event_time(), nonzero): the pool
// sampler's interval is compared against it (pool_sampler.h). A function of its own, so that the
// events that do not need it pay nothing for it.
void record_at(const EventArgs& a, uint64_t time) noexcept;

// Records an event that carries a string instead of a stack (marks, thread names, modules).
void record_string(wire::Kind kind, uint64_t aux, const char* s) noexcept;
// Same with explicit length (the bytes may contain NULs).
void record_bytes(wire::Kind kind, uint64_t aux, const char* s, size_t len) noexcept;
// Records a string event and waits (at most timeout_ns) until the collector has consumed it:
// a snapshot request returns once its file is written.
void record_string_and_wait(wire::Kind kind, uint64_t aux, const char* s,
                            uint64_t timeout_ns) noexcept;

}  // namespace cumemtrace::preload
