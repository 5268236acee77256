// Contract: the automatic phases' ownership walks of one traced process (kTorchOwners: the data
// pointers and sizes of the parameters, gradients or optimizer state at one moment), for the tool
// section's ownership, one OwnerWalk per walk in ring order: a record marked kOwnersFirst starts a
// walk of its role at its time, the role's records after it append their pairs to it (none when
// the walk's first record was dropped). All walks are kept (the analysis joins each with the
// blocks live at its time); a role outside 1..3 is a corrupt record (CorruptRing).
// The names of the walks' tensors (kTorchNames of a role: lines "<hex data pointer> <parameter
// name>") become the tool section's tensor_names the same way: a table per first record, the
// role's later records appending to it.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "live/ring_reader.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

// Calls fn(address, name) for each line "<hex address> <name>" of a kTorchNames record's text;
// a line that does not parse (no hex address, no name) is skipped.
template <typename Fn>
void for_each_name_line(std::string_view text, Fn&& fn) {
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    const size_t sp = line.find(' ');
    if (sp == 0 || sp == std::string_view::npos || sp + 1 >= line.size() || sp > 16) continue;
    uint64_t address = 0;
    bool ok = true;
    for (const char c : line.substr(0, sp)) {
      const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (d < 0) ok = false;
      address = address << 4 | static_cast<uint64_t>(d < 0 ? 0 : d);
    }
    if (ok) fn(address, line.substr(sp + 1));
  }
}

class OwnershipWalks {
 public:
  // True when the record started a walk.
  bool on_owners(const Record& r, int64_t t);
  const std::vector<snap::OwnerWalk>& walks() const { return walks_; }
  // A kTorchNames record of a role (1..3; the caller routes the module table elsewhere). True
  // when it started a table.
  bool on_names(const Record& r, int64_t t);
  const std::vector<snap::TensorNames>& names() const { return names_; }

 private:
  static constexpr size_t kNoWalk = ~size_t{0};
  std::vector<snap::OwnerWalk> walks_;
  size_t open_[9] = {kNoWalk, kNoWalk, kNoWalk, kNoWalk, kNoWalk,
                     kNoWalk, kNoWalk, kNoWalk, kNoWalk};  // by role: its latest walk
  std::vector<snap::TensorNames> names_;
  size_t open_names_[4] = {kNoWalk, kNoWalk, kNoWalk, kNoWalk};  // parameter..optimizer state
};

}  // namespace cumemtrace::collect
