#include "core/emitter.h"

#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

namespace cumemtrace::preload {

std::atomic<int> g_session_state{static_cast<int>(SessionState::kIdle)};
RingProducer g_ring;
constinit thread_local uint32_t t_tid __attribute__((tls_model("initial-exec"))) = 0;

bool emit_bytes(wire::Kind kind, uint64_t aux, const char* s, size_t len, uint32_t tid,
                uint64_t* ticket) noexcept {
  if (len > wire::kMaxExtraSlots * wire::kPayloadBytes) {
    len = wire::kMaxExtraSlots * wire::kPayloadBytes;
  }
  EventFields f{kind};
  f.aux = aux;
  f.size = len;
  f.flags = wire::kFlagStringRecord;
  return emit(f, tid, 0, s, static_cast<uint32_t>(len), 0, 0, ticket);
}

__attribute__((noinline)) uint32_t first_event_of_thread() noexcept {
  t_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  char name[17] = {};
  prctl(PR_GET_NAME, name, 0, 0, 0);
  emit_bytes(wire::Kind::kThreadName, 0, name, strnlen(name, sizeof name), t_tid);
  return t_tid;
}

void forget_thread_cache() noexcept {
  t_tid = 0;
}

bool record_bytes(wire::Kind kind, uint64_t aux, const char* s, size_t len,
                  uint64_t wait_ns) noexcept {
  if (!ensure_session()) return false;
  uint64_t ticket = 0;
  if (!emit_bytes(kind, aux, s, len, current_tid(), &ticket)) return false;
  if (wait_ns) ring().wait_consumed(ticket, wait_ns);
  return true;
}

}  // namespace cumemtrace::preload
