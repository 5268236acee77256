#include "live/ownership_walks.h"

#include <cstring>

#include <fmt/format.h>

namespace cumemtrace::collect {

// The ring reader checked the payload (whole pairs).
bool OwnershipWalks::on_owners(const Record& r, int64_t t) {
  const uint64_t role = r.ev.aux & ~wire::kOwnersFirst;
  if (role < static_cast<uint64_t>(snap::OwnerRole::kParameter) ||
      role > static_cast<uint64_t>(snap::OwnerRole::kParameterUnsharded)) {
    throw CorruptRing(fmt::format("record {} ownership walk of role {}", r.ticket, r.ev.aux));
  }
  const bool first = r.ev.aux & wire::kOwnersFirst;
  if (first) {
    snap::OwnerWalk w;
    w.time_us = t;
    w.role = static_cast<snap::OwnerRole>(role);
    open_[role] = walks_.size();
    walks_.push_back(std::move(w));
  } else if (open_[role] == kNoWalk) {
    return false;  // the walk's first record was dropped (counted in events_dropped)
  }
  auto& tensors = walks_[open_[role]].tensors;
  for (size_t off = 0; off + 16 <= r.text.size(); off += 16) {
    uint64_t pair[2];
    std::memcpy(pair, r.text.data() + off, sizeof pair);
    tensors.emplace_back(pair[0], pair[1]);
  }
  return first;
}

}  // namespace cumemtrace::collect
