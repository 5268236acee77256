// Contract: the producer side of the shared ring (layout in wire_format.h). Any thread may call
// publish() concurrently; it never allocates, never locks and never throws. When the ring is full
// it waits while the collector lives, for at most `max_wait_ns`; after that (or at once when the
// collector is gone) the record is counted in RingHeader::dropped instead of being written.
#pragma once

#include <cstdint>

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
