// Contract: the one emitter into the ring, and the session's state every layer reads inline.
// Everything that puts a record into the ring goes through emit() and nothing else: an event's
// fields (EventFields), the thread and time, and what follows them (frames, or a string's bytes).
// record/recorder.h decides what an event holds; this file writes it. The thread's first record
// announces its name here. The session that owns the ring and the collector connection
// (session/session.h) starts on the first event: ensure_session() calls ensure_session_slow(),
// declared here and defined there, the one call from the bottom of the preload upwards (a link
// edge, never an include). Nothing here allocates, locks or throws.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/event_clock.h"
#include "core/ring_producer.h"
#include "wire/wire_format.h"

namespace cumemtrace::preload {

// States below kOff may record (tracing_possible()). kPaused: a running session whose hooks
// record nothing for now, only ever set by cumemtrace_bench_pause_recording (a benchmark's
// in-process A/B); everything else treats it as not running.
enum class SessionState : int { kIdle = 0, kStarting = 1, kRunning = 2, kOff = 3, kPaused = 4 };

// The process's one ring (core/emitter.cpp; read inline per event).
extern RingProducer g_ring;
inline RingProducer& ring() noexcept {
  return g_ring;
}

// The session's state (a SessionState); read inline on every event, written by session.cpp.
extern std::atomic<int> g_session_state;

// Starts the session if it is idle; returns true when events can be recorded (session/session.cpp).
bool ensure_session_slow() noexcept;
inline bool ensure_session() noexcept {
  return g_session_state.load(std::memory_order_acquire) ==
             static_cast<int>(SessionState::kRunning) ||
         ensure_session_slow();
}
inline SessionState session_state() noexcept {
  return static_cast<SessionState>(g_session_state.load(std::memory_order_acquire));
}

// False once tracing is known to be off (disabled, failed, or AT_SECURE) or while a benchmark
// has paused it: hooks may then skip the work of preparing an event. One load and compare.
inline bool tracing_possible() noexcept {
  return static_cast<int>(session_state()) < static_cast<int>(SessionState::kOff);
}

// The calling thread's kernel id, 0 until its first record (which announces the thread's name).
extern thread_local constinit uint32_t t_tid __attribute__((tls_model("initial-exec")));

// The kernel thread id, cached per thread (reset in a forked child by forget_thread_cache); a
// thread announces its name (kThreadName) with its first record.
uint32_t first_event_of_thread() noexcept;
inline uint32_t current_tid() noexcept {
  const uint32_t tid = t_tid;
  return tid ? tid : first_event_of_thread();
}

// Called in a forked child: the calling thread's cached id belongs to the parent.
void forget_thread_cache() noexcept;

// The fields of an event that its hook (or a layer below) fills in; the rest of the record (its
// time, thread, frame counts, continuation slots) is written by emit(). Zero means none, device -1
// no device.
struct EventFields {
  wire::Kind kind;
  wire::Api api = wire::Api::kNone;
  int32_t result = 0;
  uint64_t addr = 0;
  uint64_t size = 0;
  int device = -1;
  uint64_t stream = 0;
  uint64_t aux = 0;
  uint8_t flags = 0;
};

// Every field of a record's payload (ev may be a slot's uninitialized storage).
__attribute__((always_inline)) inline void write_payload(wire::EventPayload& ev,
                                                         const EventFields& f, uint32_t tid,
                                                         uint64_t time, unsigned nframes,
                                                         unsigned npyframes) noexcept {
  ev.time_ns = time;
  ev.addr = f.addr;
  ev.size = f.size;
  ev.stream = f.stream;
  ev.aux = f.aux;
  ev.tid = tid;
  ev.device = static_cast<int16_t>(f.device);
  ev.kind = f.kind;
  ev.api = f.api;
  ev.flags = f.flags;
  ev.extra_slots = 0;  // publish() sets it for records with continuation slots
  ev.nframes = static_cast<uint8_t>(nframes);
  ev.npyframes = static_cast<uint8_t>(npyframes);
  ev.result = f.result;
}

// The one writer of a record: `f` by thread `tid` at `time` (0: the clock is read here, just
// before the ticket is taken), then `extra_bytes` from `extra` in continuation slots (`nframes`
// native frames and `npyframes` Python (code, line) pairs, or a string's bytes). A record with
// nothing after it is written straight into its slot, without a copy: always inlined, so a call
// with no extra bytes compiles to that path alone (the hot path of a stack-less event). Its
// ticket in *ticket when given; false when the record was dropped (counted in the ring).
__attribute__((always_inline)) inline bool emit(const EventFields& f, uint32_t tid, uint64_t time,
                                                const void* extra, uint32_t extra_bytes,
                                                unsigned nframes, unsigned npyframes,
                                                uint64_t* ticket) noexcept {
  const uint64_t now = time ? time : event_time();
  if (extra_bytes == 0) {
    uint64_t t = 0;
    wire::EventPayload* ev = ring().reserve_one(t);
    if (!ev) return false;
    write_payload(*ev, f, tid, now, 0, 0);
    ring().commit_one(t);
    if (ticket) *ticket = t;
    return true;
  }
  wire::EventPayload ev;
  write_payload(ev, f, tid, now, nframes, npyframes);
  return ring().publish(ev, extra, extra_bytes, ticket);
}

// A record that carries bytes instead of frames (marks, thread names, modules, a device's bus id,
// code objects' names): its fields, the bytes cut at what kMaxExtraSlots slots hold, then emit().
// Its own function because the layers below record/ announce strings on a record's path (the
// thread's name, a device's bus id) with a thread id they already have and no session check.
bool emit_bytes(wire::Kind kind, uint64_t aux, const char* s, size_t len, uint32_t tid,
                uint64_t* ticket = nullptr) noexcept;

// Records `len` bytes (they may contain NULs) as a `kind` event of the calling thread; with
// wait_ns, then waits (at most that long) until the collector has consumed it: a snapshot request
// returns once its file is written. False when nothing was recorded: tracing is off, or the record
// was dropped.
bool record_bytes(wire::Kind kind, uint64_t aux, const char* s, size_t len,
                  uint64_t wait_ns = 0) noexcept;
// The same with a NUL-terminated string.
inline bool record_string(wire::Kind kind, uint64_t aux, const char* s,
                          uint64_t wait_ns = 0) noexcept {
  return record_bytes(kind, aux, s, strnlen(s, wire::kMaxExtraSlots * wire::kPayloadBytes),
                      wait_ns);
}

}  // namespace cumemtrace::preload
