// Contract: what the hooks call to record an event. Every function here is noexcept, allocates
// nothing and takes no lock on the hot path. The first event starts the session (ring, collector
// connection) lazily; when starting fails, tracing turns off with one `cumemtrace:` line and every
// later call returns at once. Hooks wrap their body in a ReentryGuard and record only when it is
// the outermost one, so a driver call made from inside a hook is never recorded twice.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "cfi_unwinder.h"
#include "event_clock.h"
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

// Sets g_plain_kinds from the configuration: called by the session before it runs.
void set_plain_kinds() noexcept;

// Records an event that carries a string instead of a stack (marks, thread names, modules).
void record_string(wire::Kind kind, uint64_t aux, const char* s) noexcept;
// Same with explicit length (the bytes may contain NULs; more than kMaxExtraSlots slots hold are
// cut). False when nothing was recorded: tracing is off, or the record was dropped.
bool record_bytes(wire::Kind kind, uint64_t aux, const char* s, size_t len) noexcept;
// Records a string event and waits (at most timeout_ns) until the collector has consumed it:
// a snapshot request returns once its file is written.
void record_string_and_wait(wire::Kind kind, uint64_t aux, const char* s,
                            uint64_t timeout_ns) noexcept;

// Every field of a record's payload (ev may be a slot's uninitialized storage): the one writer of
// an event's fixed part, for record()'s paths and record_fields()'s.
inline void write_payload(wire::EventPayload& ev, wire::Kind kind, wire::Api api, int32_t result,
                          uint64_t addr, uint64_t size, uint64_t stream, uint64_t aux, int device,
                          uint8_t flags, uint32_t tid, uint64_t time, unsigned nframes,
                          unsigned npyframes) noexcept {
  ev.time_ns = time;
  ev.addr = addr;
  ev.size = size;
  ev.stream = stream;
  ev.aux = aux;
  ev.tid = tid;
  ev.device = static_cast<int16_t>(device);
  ev.kind = kind;
  ev.api = api;
  ev.flags = flags;
  ev.extra_slots = 0;  // publish() sets it for records with frames
  ev.nframes = static_cast<uint8_t>(nframes);
  ev.npyframes = static_cast<uint8_t>(npyframes);
  ev.result = result;
}

// A record without frames, written straight into its slot at `time` (0: the clock is read here,
// just before the ticket is taken): the one stack-less writer, for record()'s path and
// record_fields()'s. False when the record was dropped (counted in the ring).
__attribute__((always_inline)) inline bool publish_plain(wire::Kind kind, wire::Api api,
                                                         int32_t result, uint64_t addr,
                                                         uint64_t size, uint64_t stream,
                                                         uint64_t aux, int device, uint8_t flags,
                                                         uint32_t tid, uint64_t time,
                                                         uint64_t& ticket) noexcept {
  const uint64_t now = time ? time : event_time();
  wire::EventPayload* ev = ring().reserve_one(ticket);
  if (!ev) return false;
  write_payload(*ev, kind, api, result, addr, size, stream, aux, device, flags, tid, now, 0, 0);
  ring().commit_one(ticket);
  return true;
}

// The calling thread's kernel id, 0 until its first record (which announces the thread's name).
extern thread_local constinit uint32_t t_tid __attribute__((tls_model("initial-exec")));
// CUDA ordinals already announced with their PCI bus id (kDevice), one bit each.
extern std::atomic<uint64_t> g_devices_announced;
// The kinds that record() writes without a stack and without waiting for the collector, one bit
// per wire::Kind: a function of the configuration, set before the session runs (recorder.cpp);
// 0 under CUMEMTRACE_DEBUG, whose meter times every record. Never kTorchBlock (whether one takes
// a stack depends on its action) nor kExit.
extern std::atomic<uint64_t> g_plain_kinds;

// record_fields()'s way when the event cannot take the fast path: an EventArgs, then record_at().
void record_fields_general(wire::Kind kind, wire::Api api, uint64_t addr, uint64_t size, int device,
                           uint64_t stream, uint8_t flags, uint64_t time) noexcept;

// record() (time 0) or record_at() of an event with these fields and the rest zero (device -1:
// none), inlined into the hook: when the event takes no stack, it is written straight into its
// slot. That is the hot path of a stack-less allocation and of every free (frees take no stack
// by default). On a cudaMallocAsync pool hit (about 1 us a pair) the general path's call, its
// EventArgs and its checks were a third of the instructions recording added (docs/performance.md,
// fourteenth round). Anything else goes the general way with the same fields: the thread's first
// record, a device not yet announced, a session not running, stacks, the meter.
__attribute__((always_inline)) inline void record_fields(wire::Kind kind, wire::Api api,
                                                         uint64_t addr, uint64_t size, int device,
                                                         uint64_t stream, uint8_t flags,
                                                         uint64_t time) noexcept {
  const uint32_t tid = t_tid;
  if (tid &&
      g_session_state.load(std::memory_order_acquire) == static_cast<int>(SessionState::kRunning) &&
      (g_plain_kinds.load(std::memory_order_relaxed) >> static_cast<unsigned>(kind) & 1) &&
      (device < 0 ||
       (device < 64 && (g_devices_announced.load(std::memory_order_relaxed) >> device & 1)))) {
    uint64_t ticket = 0;
    publish_plain(kind, api, 0, addr, size, stream, 0, device, flags, tid, time, ticket);
    return;
  }
  record_fields_general(kind, api, addr, size, device, stream, flags, time);
}

}  // namespace cumemtrace::preload
