#include "core/ring_producer.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/event_clock.h"

namespace cumemtrace::preload {

namespace {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

void RingProducer::attach(wire::RingHeader* header, wire::Slot* slots, uint64_t max_wait_ns) {
  slots_ = slots;
  mask_ = header->capacity - 1;
  max_wait_ns_ = max_wait_ns;
  tail_seen_.store(header->tail.load(std::memory_order_acquire), std::memory_order_release);
  header_ = header;
}

bool RingProducer::collector_alive() const noexcept {
  const uint32_t state = header_->collector_state.load(std::memory_order_acquire);
  if (state == wire::kCollectorGone) return false;
  const int pid = header_->collector_pid.load(std::memory_order_relaxed);
  if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
    collector_lost();
    return false;
  }
  return true;
}

void RingProducer::collector_lost() const noexcept {
  wire::RingHeader* h = header_;
  if (!h || h->collector_state.exchange(wire::kCollectorGone, std::memory_order_acq_rel) ==
                wire::kCollectorGone) {
    return;
  }
  char line[128];
  const int n = snprintf(line, sizeof line,
                         "cumemtrace: collector gone; no snapshot will be written for PID %d\n",
                         static_cast<int>(h->pid));
  if (n > 0 && static_cast<size_t>(n) < sizeof line) {
    ssize_t w = ::write(STDERR_FILENO, line, static_cast<size_t>(n));
    (void)w;
  }
}

bool RingProducer::reserve(uint64_t n, uint64_t& ticket) noexcept {
  const uint64_t cap = header_->capacity;
  uint64_t head = header_->head.load(std::memory_order_relaxed);
  uint64_t full_since = 0;  // when this reservation first found the ring full
  unsigned spins = 0;
  // Counts the time this reservation waited, whatever its outcome.
  auto waited = [&]() noexcept {
    if (!full_since) return;
    full_waits_.fetch_add(1, std::memory_order_relaxed);
    full_wait_ns_.fetch_add(monotonic_ns() - full_since, std::memory_order_relaxed);
  };
  for (;;) {
    const uint64_t tail = header_->tail.load(std::memory_order_acquire);
    if (tail > tail_seen_.load(std::memory_order_relaxed)) {
      // Racing producers may leave an older value: still a lower bound.
      tail_seen_.store(tail, std::memory_order_release);
    }
    if (head + n - tail <= cap) {
      if (header_->head.compare_exchange_weak(head, head + n, std::memory_order_acq_rel,
                                              std::memory_order_relaxed)) {
        if (header_->stalled.load(std::memory_order_relaxed)) {
          header_->stalled.store(0, std::memory_order_relaxed);
        }
        ticket = head;
        waited();
        return true;
      }
      continue;  // head moved; `head` holds the new value
    }
    if (!full_since) full_since = monotonic_ns();
    // Full. A producer that already timed out marks the ring stalled: later producers drop at
    // once instead of each waiting the full bound, until the collector frees space again.
    if (header_->stalled.load(std::memory_order_relaxed) || !collector_alive()) {
      waited();
      return false;
    }
    if (++spins < 64) {
      cpu_relax();
    } else {
      if (monotonic_ns() - full_since > max_wait_ns_) {
        header_->stalled.store(1, std::memory_order_relaxed);
        waited();
        return false;
      }
      timespec ts{0, 20000};  // 20 us: the collector polls every millisecond or so
      nanosleep(&ts, nullptr);
    }
    head = header_->head.load(std::memory_order_relaxed);
  }
}

void RingProducer::wait_consumed(uint64_t ticket, uint64_t timeout_ns) noexcept {
  wire::RingHeader* h = header_;
  if (!h) return;
  const uint64_t start = monotonic_ns();
  while (h->tail.load(std::memory_order_acquire) <= ticket && collector_alive()) {
    if (monotonic_ns() - start > timeout_ns) return;
    timespec ts{0, 100000};
    nanosleep(&ts, nullptr);
  }
}

bool RingProducer::publish(wire::EventPayload& ev, const void* extra, uint32_t extra_bytes,
                           uint64_t* ticket_out) noexcept {
  wire::RingHeader* h = header_;
  if (!h) return false;
  if (extra_bytes == 0) {
    ev.extra_slots = 0;
    return publish_one(ev, ticket_out);
  }
  const uint32_t extra_slots =
      static_cast<uint32_t>((extra_bytes + wire::kPayloadBytes - 1) / wire::kPayloadBytes);
  ev.extra_slots = static_cast<uint8_t>(extra_slots);
  uint64_t ticket;
  if (!reserve(1 + extra_slots, ticket)) {
    h->dropped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  after_last_turn(ticket, 1 + extra_slots);
  const auto* bytes = static_cast<const unsigned char*>(extra);
  for (uint32_t i = 0; i < extra_slots; ++i) {
    wire::Slot& s = slots_[(ticket + 1 + i) & mask_];
    const uint32_t off = i * static_cast<uint32_t>(wire::kPayloadBytes);
    const uint32_t len = extra_bytes - off < wire::kPayloadBytes
                             ? extra_bytes - off
                             : static_cast<uint32_t>(wire::kPayloadBytes);
    std::memcpy(s.payload, bytes + off, len);
    s.seq.store(ticket + 2 + i, std::memory_order_release);
  }
  wire::Slot& s = slots_[ticket & mask_];
  std::memcpy(s.payload, &ev, sizeof ev);
  s.seq.store(ticket + 1, std::memory_order_release);
  // The next record of this thread is likely as long as this one.
  prefetch_slots(ticket + 1 + extra_slots, 1 + extra_slots);
  if (ticket_out) *ticket_out = ticket;
  return true;
}

}  // namespace cumemtrace::preload
