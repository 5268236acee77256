#include "live/ownership_walks.h"

#include <cstring>

#include <fmt/format.h>

namespace cumemtrace::collect {

// The ring reader checked the payload (whole pairs).
bool OwnershipWalks::on_owners(const Record& r, int64_t t) {
  const uint64_t role = r.ev.aux & ~wire::kOwnersFirst;
  if (role < static_cast<uint64_t>(snap::OwnerRole::kParameter) ||
      role > static_cast<uint64_t>(snap::OwnerRole::kKvCache)) {
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

bool OwnershipWalks::on_names(const Record& r, int64_t t) {
  const uint64_t role = r.ev.aux & ~wire::kOwnersFirst;
  if (role < static_cast<uint64_t>(snap::OwnerRole::kParameter) ||
      role > static_cast<uint64_t>(snap::OwnerRole::kOptimizerState)) {
    throw CorruptRing(fmt::format("record {} tensor names of role {}", r.ticket, r.ev.aux));
  }
  const bool first = r.ev.aux & wire::kOwnersFirst;
  if (first) {
    snap::TensorNames n;
    n.time_us = t;
    n.role = static_cast<snap::OwnerRole>(role);
    open_names_[role] = names_.size();
    names_.push_back(std::move(n));
  } else if (open_names_[role] == kNoWalk) {
    return false;  // the table's first record was dropped
  }
  auto& names = names_[open_names_[role]].names;
  for_each_name_line(r.text, [&](uint64_t address, std::string_view name) {
    names.emplace(std::to_string(address), std::string(name));
  });
  return first;
}

}  // namespace cumemtrace::collect
