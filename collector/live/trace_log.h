// Contract: the trace of one traced process in ring order, the entries every tracker adds
// (driver, graph and PyTorch sources), optionally bounded to the newest max_entries (0: all);
// entries pushed past the bound drop the oldest, counted in dropped().
// Adoption: PyTorch's caching allocator records a segment after the driver allocation (or the
// cuMemMap of a page) it made, so when that record comes the driver's entries are already here.
// adopt() marks those entries adopted in place: they stay in the log, are never written into a
// snapshot and count nothing against the bound (an entry counts while it is not adopted, exactly
// as if it had never been pushed). Entries are adoptable while among the newest kAdoptWindow
// entries that count (the driver records just before PyTorch does, at most a few other threads'
// events apart), and are never unmarked: a snapshot built between the driver's record and
// PyTorch's shows the driver's entries, as nothing yet says PyTorch owns that memory.
#pragma once

#include <cstdint>
#include <deque>

#include "live/device_ledger.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

class TraceLog {
 public:
  static constexpr size_t kAdoptWindow = 4096;

  // The ledger lists every device that has an entry (push names it there).
  TraceLog(uint64_t max_entries, DeviceLedger& ledger) : max_(max_entries), ledger_(ledger) {}

  // One entry on device's list (an entry holds no device: its list is its device).
  void push(int device, const snap::TraceEntry& e);
  // Marks the newest adoptable driver or graph entry of action a at addr adopted; false: none.
  bool adopt(snap::Action a, uint64_t addr);
  // Marks the newest adoptable driver OOM entry of device adopted; false: none.
  bool adopt_oom(int device);

  uint64_t max_entries() const { return max_; }
  uint64_t dropped() const { return dropped_; }
  // Entries that a snapshot shows (not adopted), oldest first.
  size_t size() const { return counted_; }
  // The shown entries into s.device_traces, one list per device of the ledger (at least one).
  void write(snap::Snapshot& s) const;

 private:
  struct Entry {
    snap::TraceEntry e;
    int device = 0;
    bool adopted = false;
  };
  // Marks the newest adoptable entry (not PyTorch's, among the newest kAdoptWindow counted) that
  // match(entry) accepts.
  template <typename Match>
  bool adopt_newest(Match match);

  uint64_t max_;
  DeviceLedger& ledger_;
  std::deque<Entry> entries_;
  size_t counted_ = 0;  // entries not adopted
  uint64_t dropped_ = 0;
};

}  // namespace cumemtrace::collect
