// Contract: the producer side of the shared ring (layout in wire_format.h). Any thread may call
// publish() concurrently; it never allocates, never locks and never throws. When the ring is full
// it waits while the collector lives, for at most `max_wait_ns`; after that (or at once when the
// collector is gone) the record is counted in RingHeader::dropped instead of being written.
#pragma once

#include <cstdint>
#include <cstring>

#include "wire_format.h"

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

  // A record without continuation slots (ev.extra_slots must be 0): one ticket, one slot.
  bool publish_one(const wire::EventPayload& ev, uint64_t* ticket_out = nullptr) noexcept {
    wire::RingHeader* h = header_;
    if (!h) return false;
    uint64_t ticket = h->head.load(std::memory_order_relaxed);
    // Fast path: space (ticket - tail < capacity) and no other producer in between; anything
    // else (full, contention, a stalled ring to clear) takes the general loop.
    if (ticket - h->tail.load(std::memory_order_acquire) > mask_ ||
        h->stalled.load(std::memory_order_relaxed) ||
        !h->head.compare_exchange_strong(ticket, ticket + 1, std::memory_order_acq_rel,
                                         std::memory_order_relaxed)) {
      if (!reserve(1, ticket)) {
        h->dropped.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    }
    wire::Slot& s = slots_[ticket & mask_];
    std::memcpy(s.payload, &ev, sizeof ev);
    s.seq.store(ticket + 1, std::memory_order_release);
    if (ticket_out) *ticket_out = ticket;
    return true;
  }

  // Waits (bounded) until the collector has consumed the record of `ticket`. Used after an OOM
  // so that its snapshot is written before the application sees the error.
  void wait_consumed(uint64_t ticket, uint64_t timeout_ns) noexcept;

 private:
  bool reserve(uint64_t n, uint64_t& ticket) noexcept;
  bool collector_alive() const noexcept;

  wire::RingHeader* header_ = nullptr;
  wire::Slot* slots_ = nullptr;
  uint64_t mask_ = 0;
  uint64_t max_wait_ns_ = 0;
};

}  // namespace cumemtrace::preload
