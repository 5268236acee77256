// Contract: the consumer side of one traced process's ring (layout in preload/wire/wire_format.h).
// Everything in the shared memory is untrusted: the header is validated against the memfd's real
// size and the wire version, every record's lengths are bounds-checked, and a record that breaks
// the rules raises CorruptRing (the session then ends with an error, never a crash); so does an
// ownership walk (kTorchOwners) that is not a byte record of whole (pointer, bytes) pairs. drain()
// hands out only fully published records, in ticket order, with their times in CLOCK_MONOTONIC ns
// (live/event_clock.h converts a TSC ring's), and frees their slots for the producers.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "live/corrupt_ring.h"
#include "live/event_clock.h"
#include "wire_format.h"

namespace cumemtrace::collect {

struct Record {
  uint64_t ticket = 0;
  wire::EventPayload ev{};
  std::vector<uint64_t> frames;    // return addresses, innermost first
  std::vector<uint64_t> pyframes;  // (code object address, line) pairs, innermost first
  std::string text;                // string records (module path, thread name, mark name)
};

class RingReader {
 public:
  // Takes ownership of memfd. Throws CorruptRing when it is not a ring of this wire version.
  explicit RingReader(int memfd);
  ~RingReader();
  RingReader(const RingReader&) = delete;
  RingReader& operator=(const RingReader&) = delete;

  // Calls `fn` for each published record, at most `max_records`; returns how many.
  size_t drain(const std::function<void(const Record&)>& fn, size_t max_records = SIZE_MAX);

  // Slots reserved by producers but never published (a thread died mid-record with its process).
  uint64_t unpublished_slots() const;
  uint64_t dropped() const;
  const wire::RingHeader& header() const { return *header_; }
  void mark_collector(int pid, wire::CollectorState state);
  // The memfd's inode: how the ring shows in the producer's /proc/PID/maps.
  uint64_t inode() const { return inode_; }

 private:
  wire::RingHeader* header_ = nullptr;
  wire::Slot* slots_ = nullptr;
  size_t bytes_ = 0;
  uint64_t mask_ = 0;
  uint64_t tail_ = 0;
  uint64_t inode_ = 0;
  Record scratch_;
  std::optional<EventClock> clock_;  // made once the header is validated
};

}  // namespace cumemtrace::collect
