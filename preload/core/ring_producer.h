// Contract: the producer side of the shared ring (layout in wire_format.h). Any thread may call
// publish() concurrently; it never allocates, never locks and never throws. When the ring is full
// it waits while the collector lives, for at most `max_wait_ns`; after that (or at once when the
// collector is gone) the record is counted in RingHeader::dropped instead of being written.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>

#include "wire/wire_format.h"

namespace cumemtrace::preload {

class RingProducer {
 public:
  void attach(wire::RingHeader* header, wire::Slot* slots, uint64_t max_wait_ns);
  void detach() { header_ = nullptr; }
  bool attached() const { return header_ != nullptr; }

  // Writes `ev` plus `extra_bytes` of continuation data (frames or string bytes) as one record.
  // Returns false when the record was dropped.
  bool publish(wire::EventPayload& ev, const void* extra, uint32_t extra_bytes,
               uint64_t* ticket_out = nullptr) noexcept;

  // A record without continuation slots, written in place: reserve_one() takes the ticket and
  // returns the slot's payload (uninitialized: the caller writes every field, extra_slots = 0),
  // commit_one() publishes it. Null when the record was dropped. Nothing may run in between but
  // the stores: the collector waits on that slot. Always inlined: they are the hot path of every
  // stack-less event (emit(), inlined into the hooks), where GCC's budget left them calls.
  __attribute__((always_inline)) wire::EventPayload* reserve_one(uint64_t& ticket) noexcept {
    wire::RingHeader* h = header_;
    if (!h) return nullptr;
    ticket = h->head.load(std::memory_order_relaxed);
    // Fast path: space (ticket - tail < capacity, judged on tail_seen_) and no other producer in
    // between; anything else (full, contention, a stalled ring to clear) takes the general loop.
    if (ticket - tail_seen_.load(std::memory_order_acquire) > mask_ ||
        h->stalled.load(std::memory_order_relaxed) ||
        !h->head.compare_exchange_strong(ticket, ticket + 1, std::memory_order_acq_rel,
                                         std::memory_order_relaxed)) {
      if (!reserve(1, ticket)) {
        h->dropped.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
      }
    }
    after_last_turn(ticket, 1);
    return new (slots_[ticket & mask_].payload) wire::EventPayload;
  }
  __attribute__((always_inline)) void commit_one(uint64_t ticket) noexcept {
    slots_[ticket & mask_].seq.store(ticket + 1, std::memory_order_release);
    prefetch_slots(ticket + 1, 1);
  }

  // The same with a payload built elsewhere (ev.extra_slots must be 0).
  bool publish_one(const wire::EventPayload& ev, uint64_t* ticket_out = nullptr) noexcept {
    uint64_t ticket;
    wire::EventPayload* slot = reserve_one(ticket);
    if (!slot) return false;
    std::memcpy(slot, &ev, sizeof ev);
    commit_one(ticket);
    if (ticket_out) *ticket_out = ticket;
    return true;
  }

  // How often a reservation found the ring full, and the time those reservations waited (the
  // collector fell behind: CUMEMTRACE_DEBUG prints it at exit).
  struct FullStats {
    uint64_t waits;
    uint64_t wait_ns;
  };
  FullStats full_stats() const noexcept {
    return {full_waits_.load(std::memory_order_relaxed),
            full_wait_ns_.load(std::memory_order_relaxed)};
  }

  // Waits (bounded) until the collector has consumed the record of `ticket`. Used after an OOM
  // so that its snapshot is written before the application sees the error.
  void wait_consumed(uint64_t ticket, uint64_t timeout_ns) noexcept;

  // The producer found the collector dead (its process is gone, or its end of the liveness
  // socket closed): marks the ring and says so in one line ("collector gone; no snapshot will be
  // written for PID N"), once per ring. Not when the collector itself stopped reading the ring (a
  // corrupt record): it still writes the snapshot then. Heap-free, lock-free.
  void collector_lost() const noexcept;

 private:
  bool reserve(uint64_t n, uint64_t& ticket) noexcept;
  bool collector_alive() const noexcept;

  // Under ThreadSanitizer only: orders the writes of the `n` slots from `ticket` on after those
  // of the records they held one ring turn ago. The order is real but runs through the
  // collector (it reads a record's seq, then stores tail, which reserve() loads), and the
  // collector maps the ring at another address, so ThreadSanitizer sees other locations and
  // reports a race between the two writers when the earlier one wrote nothing after its record.
  // Acquiring the seq that the earlier writer released, at this mapping's address, states it.
  void after_last_turn([[maybe_unused]] uint64_t ticket,
                       [[maybe_unused]] uint64_t n) const noexcept {
#if defined(__SANITIZE_THREAD__)
    for (uint64_t i = 0; i < n; ++i)
      (void)slots_[(ticket + i) & mask_].seq.load(std::memory_order_acquire);
#endif
  }

  // Asks for the `n` slots from `ticket` on in exclusive state, ahead of their writes. A slot is
  // rewritten one ring turn after the collector read it (its line is then shared with, or taken
  // from, the collector's core): without the hint every record starts with that ownership
  // transfer (an RFO) on the application's thread. The next record of a busy thread lands there.
  void prefetch_slots(uint64_t ticket, uint32_t n) const noexcept {
    for (uint32_t i = 0; i < n; ++i) {
      const void* p = &slots_[(ticket + i) & mask_];
#if defined(__x86_64__)
      asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
      __builtin_prefetch(p, 1, 3);
#endif
    }
  }

  wire::RingHeader* header_ = nullptr;
  wire::Slot* slots_ = nullptr;
  uint64_t mask_ = 0;
  uint64_t max_wait_ns_ = 0;
  // A lower bound of header_->tail, refreshed from it only when the ring looks full by this
  // bound (about once per ring turn): the collector stores tail every 256 records, and reading
  // that line on every record would pull it from the collector's core each time. Release-stored
  // after an acquire of tail, acquire-loaded: a producer that trusts it is ordered after the
  // collector's reads of the slots it frees.
  std::atomic<uint64_t> tail_seen_{0};
  // Written only by reservations that found the ring full (off the fast path).
  alignas(64) std::atomic<uint64_t> full_waits_{0};
  std::atomic<uint64_t> full_wait_ns_{0};
};

}  // namespace cumemtrace::preload
