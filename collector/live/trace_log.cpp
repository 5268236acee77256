#include "live/trace_log.h"

#include <algorithm>

namespace cumemtrace::collect {

void TraceLog::push(int device, const snap::TraceEntry& e) {
  ledger_.at(device);  // a device with events always has a trace list, even if it holds nothing
  entries_.push_back(Entry{e, sane_device(device), false});
  ++counted_;
  if (max_ && counted_ > max_) {
    // Adopted entries ahead of the oldest counted one go with it; they were never shown.
    while (entries_.front().adopted) entries_.pop_front();
    entries_.pop_front();
    --counted_;
    ++dropped_;
    while (!entries_.empty() && entries_.front().adopted) entries_.pop_front();
  }
}

template <typename Match>
bool TraceLog::adopt_newest(Match match) {
  size_t seen = 0;
  for (auto it = entries_.rbegin(); it != entries_.rend() && seen < kAdoptWindow; ++it) {
    if (it->adopted) continue;
    ++seen;
    if (it->e.source != snap::Source::kPytorch && match(*it)) {
      it->adopted = true;
      --counted_;
      return true;
    }
  }
  return false;
}

bool TraceLog::adopt(snap::Action a, uint64_t addr) {
  return adopt_newest([&](const Entry& x) { return x.e.action == a && x.e.addr == addr; });
}

bool TraceLog::adopt_oom(int device) {
  return adopt_newest([d = sane_device(device)](const Entry& x) {
    return x.e.action == snap::Action::kOom && x.device == d;
  });
}

void TraceLog::write(snap::Snapshot& s) const {
  s.device_traces.resize(std::max<size_t>(ledger_.devices().size(), 1));
  for (const Entry& x : entries_) {
    if (!x.adopted) s.device_traces[static_cast<size_t>(x.device)].push_back(x.e);
  }
}

}  // namespace cumemtrace::collect
