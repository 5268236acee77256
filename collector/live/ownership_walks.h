// Contract: the automatic phases' ownership walks of one traced process (kTorchOwners: the data
// pointers and sizes of the parameters, gradients or optimizer state at one moment), for the tool
// section's ownership, one OwnerWalk per walk in ring order: a record marked kOwnersFirst starts a
// walk of its role at its time, the role's records after it append their pairs to it (none when
// the walk's first record was dropped). All walks are kept (the analysis joins each with the
// blocks live at its time); a role outside 1..3 is a corrupt record (CorruptRing).
#pragma once

#include <cstdint>
#include <vector>

#include "live/ring_reader.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

class OwnershipWalks {
 public:
  // True when the record started a walk.
  bool on_owners(const Record& r, int64_t t);
  const std::vector<snap::OwnerWalk>& walks() const { return walks_; }

 private:
  static constexpr size_t kNoWalk = ~size_t{0};
  std::vector<snap::OwnerWalk> walks_;
  size_t open_[6] = {kNoWalk, kNoWalk, kNoWalk,
                     kNoWalk, kNoWalk, kNoWalk};  // by role: its latest walk
};

}  // namespace cumemtrace::collect
