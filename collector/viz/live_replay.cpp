#include "viz/live_replay.h"

#include <algorithm>
#include <set>
#include <unordered_set>

namespace cumemtrace::viz {

namespace {

const std::vector<snap::TraceEntry>& trace_of(const snap::Snapshot& s, int device) {
  static const std::vector<snap::TraceEntry> kEmpty;
  if (device < 0 || static_cast<size_t>(device) >= s.device_traces.size()) return kEmpty;
  return s.device_traces[device];
}

bool is_live_state(const std::string& state) {
  return state == "active_allocated" || state == "active_pending_free";
}

}  // namespace

std::vector<int> devices_of(const snap::Snapshot& s) {
  std::set<int> out;
  for (size_t d = 0; d < s.device_traces.size(); ++d)
    if (!s.device_traces[d].empty()) out.insert(static_cast<int>(d));
  for (const auto& g : s.segments) out.insert(g.device);
  return {out.begin(), out.end()};
}

std::vector<LiveBlock> preexisting_blocks(const snap::Snapshot& s, int device) {
  std::vector<LiveBlock> out;
  std::unordered_set<uint64_t> seen_alloc;
  std::unordered_set<uint64_t> live;
  for (const auto& e : trace_of(s, device)) {
    if (e.action == snap::Action::kAlloc) {
      seen_alloc.insert(e.addr);
      live.insert(e.addr);
    } else if (e.action == snap::Action::kFreeCompleted) {
      if (!seen_alloc.count(e.addr)) {
        // Freed before we saw it allocated: it was live from the start. Its stack is lost.
        out.push_back({e.addr, e.size, snap::kNoStack, 0});
        seen_alloc.insert(e.addr);
      }
      live.erase(e.addr);
    }
  }
  for (const auto& g : s.segments) {
    if (g.device != device) continue;
    uint64_t addr = g.address;
    for (const auto& b : g.blocks) {
      // PyTorch's blocks tile their segment; their own address field is what it says but the
      // viewer recomputes it, so we do the same when it is missing.
      const uint64_t a = b.address ? b.address : addr;
      addr += b.size;
      if (!is_live_state(b.state) || live.count(a)) continue;
      const uint64_t bytes = b.requested_size ? b.requested_size : b.size;
      out.push_back({a, bytes, b.stack, 0});
    }
  }
  return out;
}

LiveTracker::LiveTracker(const std::vector<LiveBlock>& initial) {
  for (const auto& b : initial) {
    auto [it, inserted] = live_.emplace(b.addr, b);
    if (inserted) live_bytes_ += b.size;
  }
}

std::optional<LiveTracker::Change> LiveTracker::apply(const snap::TraceEntry& e) {
  replaced.reset();
  switch (e.action) {
    case snap::Action::kAlloc: {
      LiveBlock b{e.addr, e.size, e.stack, e.time_us};
      auto it = live_.find(e.addr);
      if (it != live_.end()) {
        replaced = it->second;
        live_bytes_ -= it->second.size;
        it->second = b;
      } else {
        live_.emplace(e.addr, b);
      }
      live_bytes_ += b.size;
      return Change{b, true};
    }
    case snap::Action::kFreeCompleted: {
      auto it = live_.find(e.addr);
      if (it == live_.end()) return std::nullopt;
      Change c{it->second, false};
      live_bytes_ -= it->second.size;
      live_.erase(it);
      return c;
    }
    case snap::Action::kSegmentAlloc:
    case snap::Action::kSegmentMap:
      reserved_bytes_ += e.size;
      return std::nullopt;
    case snap::Action::kSegmentFree:
    case snap::Action::kSegmentUnmap:
      // A trace that starts mid-run can free segments it never saw reserved; clamp at zero.
      reserved_bytes_ -= std::min(reserved_bytes_, e.size);
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

DevicePeak find_peak(const snap::Snapshot& s, int device) {
  const auto& tr = trace_of(s, device);
  LiveTracker t(preexisting_blocks(s, device));
  DevicePeak p{t.live_bytes(), tr.empty() ? 0 : tr.front().time_us, 0};
  for (size_t i = 0; i < tr.size(); ++i) {
    t.apply(tr[i]);
    if (t.live_bytes() > p.bytes) p = {t.live_bytes(), tr[i].time_us, i + 1};
  }
  return p;
}

std::vector<LiveBlock> live_after(const snap::Snapshot& s, int device, size_t entries_applied) {
  const auto& tr = trace_of(s, device);
  LiveTracker t(preexisting_blocks(s, device));
  const size_t n = std::min(entries_applied, tr.size());
  for (size_t i = 0; i < n; ++i) t.apply(tr[i]);
  std::vector<LiveBlock> out;
  out.reserve(t.live().size());
  for (const auto& [addr, b] : t.live()) out.push_back(b);
  std::sort(out.begin(), out.end(),
            [](const LiveBlock& a, const LiveBlock& b) { return a.addr < b.addr; });
  return out;
}

}  // namespace cumemtrace::viz
