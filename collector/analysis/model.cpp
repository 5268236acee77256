#include "analysis/model.h"

#include <algorithm>
#include <limits>
#include <unordered_set>

namespace cumemtrace::analysis {

namespace {

const std::vector<snap::TraceEntry> kEmptyTrace;

bool adds(Flavor f, snap::Action a) {
  if (f == Flavor::kTorch) return a == snap::Action::kAlloc;
  return a == snap::Action::kSegmentAlloc || a == snap::Action::kSegmentMap;
}
bool removes(Flavor f, snap::Action a) {
  if (f == Flavor::kTorch) return a == snap::Action::kFreeCompleted;
  return a == snap::Action::kSegmentFree || a == snap::Action::kSegmentUnmap;
}

// Live state while replaying. cumemtrace puts the stack on the `alloc` entry next to the
// segment_alloc that carries the bytes, in either order, so a stack seen before its segment
// waits in `pending`.
struct LiveSet {
  Flavor flavor;
  std::unordered_map<uint64_t, Allocation> live;
  std::unordered_map<uint64_t, int32_t> pending;

  // Returns the byte change.
  int64_t apply(const snap::TraceEntry& e, int device) {
    if (adds(flavor, e.action)) {
      Allocation a{device, e.addr, e.size, e.stack, false};
      if (flavor == Flavor::kCumemtrace) {
        if (auto it = pending.find(e.addr); it != pending.end()) {
          if (a.stack == snap::kNoStack) a.stack = it->second;
          pending.erase(it);
        }
      }
      int64_t delta = static_cast<int64_t>(e.size);
      if (auto it = live.find(e.addr); it != live.end()) {
        delta -= static_cast<int64_t>(it->second.size);  // re-use without free: replace
      }
      live[e.addr] = a;
      return delta;
    }
    if (removes(flavor, e.action)) {
      auto it = live.find(e.addr);
      if (it == live.end()) return 0;
      int64_t delta = -static_cast<int64_t>(it->second.size);
      live.erase(it);
      return delta;
    }
    if (flavor == Flavor::kCumemtrace && e.action == snap::Action::kAlloc &&
        e.stack != snap::kNoStack) {
      if (auto it = live.find(e.addr); it != live.end() && it->second.stack == snap::kNoStack) {
        it->second.stack = e.stack;
      } else if (it == live.end()) {
        pending[e.addr] = e.stack;
      }
    }
    return 0;
  }
};

// PyTorch's trace records requested sizes (a 4-byte tensor is "4", its block 512), so PyTorch
// blocks count their requested size too: then the replay lands exactly on the end state.
uint64_t block_bytes(bool torch, const snap::Block& b) {
  return torch && b.requested_size ? b.requested_size : b.size;
}

}  // namespace

Flavor flavor_of(const snap::Snapshot& s) {
  return s.tool ? Flavor::kCumemtrace : Flavor::kTorch;
}

std::string_view flavor_name(Flavor f) {
  return f == Flavor::kTorch ? "PyTorch snapshot" : "cumemtrace snapshot";
}

std::vector<Allocation> live_at_exit(const snap::Snapshot& s) {
  std::vector<Allocation> out;
  const bool torch = flavor_of(s) == Flavor::kTorch;
  for (const auto& seg : s.segments) {
    // cumemtrace writes VMM mappings as expandable segments; the physical memory behind them is
    // counted once, through the cuMemCreate handles below.
    if (!torch && seg.is_expandable) continue;
    for (const auto& b : seg.blocks) {
      if (torch && b.state != "active_allocated") continue;
      if (!torch && b.state == "inactive") continue;
      out.push_back({seg.device, b.address, block_bytes(torch, b),
                     b.stack != snap::kNoStack ? b.stack : seg.stack, false});
    }
  }
  if (s.tool) {
    for (const auto& h : s.tool->vmm_handles)
      out.push_back({h.device, h.handle, h.size, h.stack, false});
  }
  return out;
}

int64_t time_origin(const snap::Snapshot& s) {
  if (s.tool && s.tool->start_time_us > 0) return s.tool->start_time_us;
  int64_t t = std::numeric_limits<int64_t>::max();
  for (const auto& tr : s.device_traces) {
    if (!tr.empty()) t = std::min(t, tr.front().time_us);
  }
  return t == std::numeric_limits<int64_t>::max() ? 0 : t;
}

int device_count(const snap::Snapshot& s) {
  int n = static_cast<int>(s.device_traces.size());
  for (const auto& g : s.segments) n = std::max(n, g.device + 1);
  if (s.tool) {
    for (const auto& d : s.tool->devices) n = std::max(n, d.device + 1);
  }
  return n;
}

DeviceReplay::DeviceReplay(const snap::Snapshot& s, int device)
    : s_(s),
      trace_(static_cast<size_t>(device) < s.device_traces.size()
                 ? &s.device_traces[static_cast<size_t>(device)]
                 : &kEmptyTrace),
      flavor_(flavor_of(s)) {
  tl_.device = device;
  const auto& tr = *trace_;

  // Pass 1: replay from an empty state, learning what existed before the first entry.
  LiveSet ls{flavor_, {}, {}};
  std::vector<Allocation> freed_before;  // freed by the trace, never allocated in it
  std::unordered_set<uint64_t> freed_before_addr;
  rel_.resize(tr.size());
  int64_t rel = 0;
  int64_t max_rel = 0;
  std::ptrdiff_t max_idx = -1;
  int64_t reserved_rel = 0, reserved_max = 0;
  std::ptrdiff_t reserved_idx = -1;
  for (size_t i = 0; i < tr.size(); ++i) {
    const auto& e = tr[i];
    if (i > 0 && e.time_us < tr[i - 1].time_us) sorted_ = false;
    if (removes(flavor_, e.action) && !ls.live.count(e.addr)) {
      if (freed_before_addr.insert(e.addr).second) {
        freed_before.push_back({device, e.addr, e.size, snap::kNoStack, true});
        rel = wrap_sub(rel, static_cast<int64_t>(e.size));
      }
    } else {
      rel = wrap_add(rel, ls.apply(e, device));
    }
    if (adds(flavor_, e.action)) ++tl_.allocations;
    if (removes(flavor_, e.action)) ++tl_.frees;
    rel_[i] = rel;
    if (rel > max_rel) {
      max_rel = rel;
      max_idx = static_cast<std::ptrdiff_t>(i);
    } else if (max_idx >= 0 && static_cast<size_t>(max_idx) + 1 == i && rel == max_rel &&
               e.action == snap::Action::kAlloc) {
      // Entries that change nothing (the `alloc` carrying the stack of the segment_alloc just
      // before it) still belong to the peak's moment.
      max_idx = static_cast<std::ptrdiff_t>(i);
    }
    if (flavor_ == Flavor::kTorch) {
      if (e.action == snap::Action::kSegmentAlloc)
        reserved_rel = wrap_add(reserved_rel, static_cast<int64_t>(e.size));
      if (e.action == snap::Action::kSegmentFree)
        reserved_rel = wrap_sub(rel, static_cast<int64_t>(e.size));
      if (reserved_rel > reserved_max) {
        reserved_max = reserved_rel;
        reserved_idx = static_cast<std::ptrdiff_t>(i);
      }
    }
  }

  // What the end state holds that the trace did not make was there from the start.
  uint64_t reserved_end = 0;
  for (const auto& seg : s.segments) {
    if (seg.device != device) continue;
    reserved_end += seg.total_size;
    for (const auto& b : seg.blocks) {
      if (b.state == "inactive") continue;
      end_stacks_[b.address] = {b.size, b.stack != snap::kNoStack ? b.stack : seg.stack};
      auto it = ls.live.find(b.address);
      if (it != ls.live.end()) continue;
      if (freed_before_addr.count(b.address)) continue;
      start_live_.push_back({device, b.address, block_bytes(flavor_ == Flavor::kTorch, b),
                             b.stack != snap::kNoStack ? b.stack : seg.stack, false});
    }
  }
  for (auto& a : freed_before) start_live_.push_back(a);
  for (const auto& a : start_live_) tl_.start_bytes += a.size;

  tl_.peak_index = max_idx;
  tl_.peak_bytes = bytes_after(max_idx);
  tl_.trace_peak_bytes = tl_.peak_bytes;
  tl_.peak_time_us = max_idx >= 0 ? tr[static_cast<size_t>(max_idx)].time_us
                                  : (tr.empty() ? 0 : tr.front().time_us);
  tl_.end_bytes =
      tr.empty() ? tl_.start_bytes : bytes_after(static_cast<std::ptrdiff_t>(tr.size()) - 1);

  // The collector's own summary saw every event, also those a capped trace no longer holds and
  // cuMemCreate'd memory that has no trace entry: when it knows a higher peak, that is the peak.
  if (s.tool) {
    for (const auto& d : s.tool->devices) {
      if (d.device == device && d.peak_bytes > tl_.peak_bytes) {
        tl_.peak_bytes = d.peak_bytes;
        tl_.peak_time_us = d.peak_time_us;
        tl_.peak_from_summary = true;
      }
    }
  }

  if (flavor_ == Flavor::kTorch) {
    tl_.has_reserved = true;
    tl_.reserved_end_bytes = reserved_end;
    const int64_t start =
        std::max<int64_t>(0, wrap_sub(static_cast<int64_t>(reserved_end), reserved_rel));
    tl_.reserved_peak_bytes = static_cast<uint64_t>(wrap_add(start, reserved_max));
    tl_.reserved_peak_time_us = reserved_idx >= 0 ? tr[static_cast<size_t>(reserved_idx)].time_us
                                                  : (tr.empty() ? 0 : tr.front().time_us);
  }
}

uint64_t DeviceReplay::bytes_after(std::ptrdiff_t index) const {
  if (index < 0 || rel_.empty()) return tl_.start_bytes;
  index = std::min<std::ptrdiff_t>(index, static_cast<std::ptrdiff_t>(rel_.size()) - 1);
  const int64_t v =
      wrap_add(static_cast<int64_t>(tl_.start_bytes), rel_[static_cast<size_t>(index)]);
  return v < 0 ? 0 : static_cast<uint64_t>(v);
}

std::vector<Allocation> DeviceReplay::live_after(std::ptrdiff_t index) const {
  LiveSet ls{flavor_, {}, {}};
  ls.live.reserve(start_live_.size());
  for (const auto& a : start_live_) ls.live.emplace(a.addr, a);
  const auto& tr = *trace_;
  const auto n = std::min<std::ptrdiff_t>(index + 1, static_cast<std::ptrdiff_t>(tr.size()));
  for (std::ptrdiff_t i = 0; i < n; ++i) ls.apply(tr[static_cast<size_t>(i)], tl_.device);
  std::vector<Allocation> out;
  out.reserve(ls.live.size());
  for (auto& [addr, a] : ls.live) {
    if (a.stack == snap::kNoStack && !a.before_trace) {
      auto it = end_stacks_.find(addr);
      if (it != end_stacks_.end() && it->second.first == a.size) a.stack = it->second.second;
    }
    out.push_back(a);
  }
  std::sort(out.begin(), out.end(),
            [](const Allocation& a, const Allocation& b) { return a.addr < b.addr; });
  return out;
}

std::ptrdiff_t DeviceReplay::index_at_time(int64_t time_us) const {
  const auto& tr = *trace_;
  if (sorted_) {
    auto it = std::upper_bound(tr.begin(), tr.end(), time_us,
                               [](int64_t t, const snap::TraceEntry& e) { return t < e.time_us; });
    return static_cast<std::ptrdiff_t>(it - tr.begin()) - 1;
  }
  std::ptrdiff_t last = -1;
  for (size_t i = 0; i < tr.size(); ++i) {
    if (tr[i].time_us <= time_us) last = static_cast<std::ptrdiff_t>(i);
  }
  return last;
}

}  // namespace cumemtrace::analysis
