#include "recorder.h"

#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cstring>

#include "module_map.h"
#include "python_stack.h"
#include "session.h"
#include "stack_capture.h"

namespace cumemtrace::preload {

thread_local int t_hook_depth __attribute__((tls_model("initial-exec"))) = 0;

namespace {

thread_local uint32_t t_tid __attribute__((tls_model("initial-exec"))) = 0;

uint64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

void publish_string(wire::Kind kind, uint64_t aux, const char* s, size_t len,
                    uint32_t tid) noexcept {
  wire::EventPayload ev{};
  ev.time_ns = now_ns();
  ev.kind = kind;
  ev.tid = tid;
  ev.device = -1;
  ev.aux = aux;
  ev.flags = wire::kFlagStringRecord;
  if (len > wire::kMaxExtraSlots * wire::kPayloadBytes) {
    len = wire::kMaxExtraSlots * wire::kPayloadBytes;
  }
  ev.size = len;
  ring().publish(ev, s, static_cast<uint32_t>(len));
}

// The kernel thread id, cached per thread (reset in a forked child by forget_thread_cache); a
// thread announces its name with its first event.
uint32_t current_tid() noexcept {
  if (t_tid == 0) {
    t_tid = static_cast<uint32_t>(syscall(SYS_gettid));
    char name[17] = {};
    prctl(PR_GET_NAME, name, 0, 0, 0);
    publish_string(wire::Kind::kThreadName, 0, name, strnlen(name, sizeof name), t_tid);
  }
  return t_tid;
}

}  // namespace

void forget_thread_cache() noexcept {
  t_tid = 0;
}

bool tracing_possible() noexcept {
  return session_state() != SessionState::kOff;
}

void record(const EventArgs& a) noexcept {
  if (!ensure_session()) return;
  // Native return addresses, then (code, line) pairs of Python frames.
  uint64_t frames[wire::kMaxStackDepth + 2 * wire::kMaxPythonFrames];
  unsigned n = 0, npy = 0;
  if (a.kind != wire::Kind::kExit && config().stack_depth) {
    n = capture_stack(frames, config().stack_depth);
    if (n) modules_note_frames(frames, n);
    if (config().python_stacks) npy = capture_python_stack(frames + n, wire::kMaxPythonFrames);
  }
  wire::EventPayload ev{};
  ev.time_ns = now_ns();
  ev.addr = a.addr;
  ev.size = a.size;
  ev.stream = a.stream;
  ev.aux = a.aux;
  ev.tid = current_tid();
  ev.device = static_cast<int16_t>(a.device);
  ev.kind = a.kind;
  ev.api = a.api;
  ev.flags = a.flags;
  ev.nframes = static_cast<uint8_t>(n);
  ev.npyframes = static_cast<uint8_t>(npy);
  ev.result = a.result;
  uint64_t ticket = 0;
  if (ring().publish(ev, frames, (n + 2 * npy) * static_cast<uint32_t>(sizeof(uint64_t)),
                     &ticket) &&
      a.kind == wire::Kind::kOom) {
    ring().wait_consumed(ticket, 5'000'000'000ull);
  }
}

void record_string(wire::Kind kind, uint64_t aux, const char* s) noexcept {
  record_bytes(kind, aux, s, strnlen(s, wire::kMaxExtraSlots * wire::kPayloadBytes));
}

void record_bytes(wire::Kind kind, uint64_t aux, const char* s, size_t len) noexcept {
  if (!ensure_session()) return;
  publish_string(kind, aux, s, len, current_tid());
}

}  // namespace cumemtrace::preload
