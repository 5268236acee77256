#include "analysis/model.h"

#include <algorithm>
#include <atomic>
#include <limits>
#include <unordered_set>

#include "analysis/frames.h"

namespace cumemtrace::analysis {

namespace {

const std::vector<snap::TraceEntry> kEmptyTrace;

bool is_pytorch(Flavor f, snap::Source src) {
  return f == Flavor::kTorch || src == snap::Source::kPytorch;
}

bool adds(Flavor f, snap::Action a) {
  if (f == Flavor::kTorch) return a == snap::Action::kAlloc;
  return a == snap::Action::kSegmentAlloc || a == snap::Action::kSegmentMap;
}
bool removes(Flavor f, snap::Action a) {
  if (f == Flavor::kTorch) return a == snap::Action::kFreeCompleted;
  return a == snap::Action::kSegmentFree || a == snap::Action::kSegmentUnmap;
}
bool segment_add(snap::Action a) {
  return a == snap::Action::kSegmentAlloc || a == snap::Action::kSegmentMap;
}
bool segment_remove(snap::Action a) {
  return a == snap::Action::kSegmentFree || a == snap::Action::kSegmentUnmap;
}
bool active(const snap::Block& b) {
  return b.state != "inactive";
}

using EndStacks = std::unordered_map<uint64_t, std::pair<uint64_t, int32_t>>;

// Live units while replaying. cumemtrace puts the stack on the driver `alloc` entry next to the
// segment_alloc that carries the bytes, in either order, so a stack seen before its segment waits
// in `pending`; a unit still without a stack takes the one its block has at the end.
struct LiveSet {
  Flavor flavor;
  int device = 0;
  const EndStacks* end_stacks = nullptr;
  std::unordered_map<uint64_t, Allocation> live;
  std::unordered_map<uint64_t, int32_t> pending;
  std::vector<UnitChange>* changes = nullptr;  // when set, every change is reported

  void note(const Allocation& a, bool added) {
    if (changes) changes->push_back({a, added});
  }

  // Removes what [addr, addr+size) covers (a ranged unmap); returns the bytes removed.
  int64_t remove_range(uint64_t addr, uint64_t size) {
    int64_t removed = 0;
    std::vector<Allocation> cut, keep;
    for (auto& [a, u] : live) {
      if (u.addr < addr + size && addr < u.addr + u.size) cut.push_back(u);
    }
    for (const auto& u : cut) {
      live.erase(u.addr);
      note(u, false);
      removed += static_cast<int64_t>(u.size);
      if (u.addr < addr) {  // the part below the range stays mapped
        Allocation lo = u;
        lo.size = addr - u.addr;
        keep.push_back(lo);
      }
      if (u.addr + u.size > addr + size) {  // and the part above it
        Allocation hi = u;
        hi.addr = addr + size;
        hi.size = u.addr + u.size - (addr + size);
        keep.push_back(hi);
      }
    }
    for (const auto& u : keep) {
      live[u.addr] = u;
      note(u, true);
      removed -= static_cast<int64_t>(u.size);
    }
    return removed;
  }

  // Returns the unit byte change. `next` is the entry after e (null at the end): the collector
  // writes a driver allocation as a segment_alloc followed by the alloc that carries its
  // frames, and the unit takes them at once, so that no moment (a peak is reached at the
  // segment_alloc) and no view sees it without its stack.
  int64_t apply(const snap::TraceEntry& e, const snap::TraceEntry* next) {
    const bool pt = is_pytorch(flavor, e.source);
    if (adds(flavor, e.action)) {
      Allocation a{device, e.addr,    snap::held_bytes(e), e.stack,   false,
                   pt,     e.time_us, e.async_pool,        e.category};
      if (a.stack == snap::kNoStack && flavor == Flavor::kCumemtrace && !pt && next &&
          e.action == snap::Action::kSegmentAlloc && next->action == snap::Action::kAlloc &&
          next->source != snap::Source::kPytorch && next->addr == e.addr) {
        a.stack = next->stack;
      }
      if (!pt) {
        if (auto it = pending.find(e.addr); it != pending.end()) {
          if (a.stack == snap::kNoStack) a.stack = it->second;
          pending.erase(it);
        }
      }
      if (a.stack == snap::kNoStack && end_stacks) {
        auto it = end_stacks->find(e.addr);
        if (it != end_stacks->end() && it->second.first == snap::held_bytes(e))
          a.stack = it->second.second;
      }
      int64_t delta = static_cast<int64_t>(snap::held_bytes(e));
      if (auto it = live.find(e.addr); it != live.end()) {
        delta -= static_cast<int64_t>(it->second.size);  // re-use without free: replace
        note(it->second, false);
      }
      live[e.addr] = a;
      note(a, true);
      return delta;
    }
    if (removes(flavor, e.action)) {
      auto it = live.find(e.addr);
      if (it == live.end()) {
        if (e.action == snap::Action::kSegmentUnmap) return -remove_range(e.addr, e.size);
        return 0;
      }
      if (e.action == snap::Action::kSegmentUnmap && e.size && e.size != it->second.size)
        return -remove_range(e.addr, e.size);
      int64_t delta = -static_cast<int64_t>(it->second.size);
      note(it->second, false);
      live.erase(it);
      return delta;
    }
    if (flavor == Flavor::kCumemtrace && !pt && e.action == snap::Action::kAlloc &&
        e.stack != snap::kNoStack) {
      if (auto it = live.find(e.addr); it != live.end() && it->second.stack == snap::kNoStack) {
        note(it->second, false);
        it->second.stack = e.stack;
        note(it->second, true);
      } else if (it == live.end()) {
        pending[e.addr] = e.stack;
      }
    }
    return 0;
  }
};

// PyTorch's trace records requested sizes (a 4-byte tensor is "4", its block 512). Where the
// replay of its allocator labelled the entries with their blocks (whatif.h label_block_sizes),
// tensors count blocks, as PyTorch's counters do; else their requested size over time. Either
// way the replay lands exactly on the end state.
uint64_t block_bytes(bool requested, const snap::Block& b) {
  return requested && b.requested_size ? b.requested_size : b.size;
}

// Whether the device's PyTorch entries carry their blocks (label_block_sizes).
bool blocks_labelled(const std::vector<snap::TraceEntry>& tr) {
  for (const auto& e : tr)
    if (e.action == snap::Action::kAlloc && e.block_units) return true;
  return false;
}

uint64_t from_start(uint64_t start, int64_t rel) {
  const int64_t v = wrap_add(static_cast<int64_t>(start), rel);
  return v < 0 ? 0 : static_cast<uint64_t>(v);
}

// What was there before the first entry: the end state minus what the trace made (never below 0).
uint64_t start_of(uint64_t end_state, int64_t rel_end) {
  const int64_t v = wrap_sub(static_cast<int64_t>(end_state), rel_end);
  return v < 0 ? 0 : static_cast<uint64_t>(v);
}

}  // namespace

Flavor flavor_of(const snap::Snapshot& s) {
  return s.tool ? Flavor::kCumemtrace : Flavor::kTorch;
}

std::string_view flavor_name(Flavor f) {
  return f == Flavor::kTorch ? "PyTorch snapshot" : "cumemtrace snapshot";
}

bool has_pytorch(const snap::Snapshot& s) {
  if (!s.tool || s.tool->pytorch) return true;
  for (const auto& g : s.segments)
    if (g.source == snap::Source::kPytorch) return true;
  for (const auto& tr : s.device_traces)
    for (const auto& e : tr)
      if (e.source == snap::Source::kPytorch) return true;
  return false;
}

bool is_request(Flavor f, const snap::TraceEntry& e) {
  if (e.action == snap::Action::kAlloc) return true;
  return f == Flavor::kCumemtrace && e.action == snap::Action::kSegmentMap &&
         e.source == snap::Source::kDriver;
}

std::vector<Allocation> live_at_exit(const snap::Snapshot& s) {
  std::vector<Allocation> out;
  const bool torch = flavor_of(s) == Flavor::kTorch;
  for (const auto& seg : s.segments) {
    const bool pt = torch || seg.source == snap::Source::kPytorch;
    // cumemtrace writes VMM mappings as expandable segments; the physical memory behind them is
    // counted once, through the cuMemCreate handles below.
    if (!pt && seg.is_expandable) continue;
    for (const auto& b : seg.blocks) {
      // PyTorch's tensors: what the caching allocator keeps cached is no leak.
      if (pt && b.state != "active_allocated") continue;
      if (!pt && b.state == "inactive") continue;
      const auto d = static_cast<size_t>(seg.device);
      const bool requested =
          torch && !(d < s.device_traces.size() && blocks_labelled(s.device_traces[d]));
      out.push_back({seg.device, b.address, block_bytes(requested, b),
                     b.stack != snap::kNoStack ? b.stack : seg.stack, false, pt, 0});
    }
  }
  if (s.tool) {
    for (const auto& h : s.tool->vmm_handles)
      out.push_back({h.device, h.handle, h.size, h.stack, false, false, h.time_us});
  }
  return out;
}

LiveCount count_live(const std::vector<Allocation>& live) {
  LiveCount c;
  for (const auto& a : live) {
    ++c.count;
    c.bytes += a.size;
    if (a.pytorch) {
      ++c.pytorch;
      c.pytorch_bytes += a.size;
    }
  }
  return c;
}

std::optional<std::string> trace_incomplete_why(const snap::Snapshot& s) {
  if (s.tool && s.tool->trace_entries_dropped) {
    const auto cap = s.allocator_settings.find("max_trace_events");
    return "the oldest " + std::to_string(s.tool->trace_entries_dropped) +
           " trace entries were dropped" +
           (cap == s.allocator_settings.end() ? "" : " (--max-trace-events " + cap->second + ")");
  }
  const auto overflowed = s.allocator_settings.find("trace_alloc_overflowed");
  if (overflowed != s.allocator_settings.end() && overflowed->second == "true") {
    const auto max = s.allocator_settings.find("trace_alloc_max_entries");
    return "PyTorch's trace overflowed its max_entries" +
           (max == s.allocator_settings.end() ? "" : " (" + max->second + ")") +
           ", so its oldest entries were dropped";
  }
  return std::nullopt;
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
    for (const auto& m : s.tool->driver_memory) n = std::max(n, m.device + 1);
  }
  return n;
}

namespace {
std::atomic<uint64_t> replays_built{0};
}  // namespace

uint64_t DeviceReplay::built() {
  return replays_built.load(std::memory_order_relaxed);
}

DeviceReplay::DeviceReplay(const snap::Snapshot& s, int device)
    : s_(s),
      trace_(device >= 0 && static_cast<size_t>(device) < s.device_traces.size()
                 ? &s.device_traces[static_cast<size_t>(device)]
                 : &kEmptyTrace),
      flavor_(flavor_of(s)) {
  replays_built.fetch_add(1, std::memory_order_relaxed);
  tl_.device = device;
  const auto& tr = *trace_;
  const bool torch = flavor_ == Flavor::kTorch;
  const bool labelled = blocks_labelled(tr);

  for (const auto& seg : s.segments) {
    if (seg.device != device) continue;
    for (const auto& b : seg.blocks) {
      if (active(b))
        end_stacks_[b.address] = {b.size, b.stack != snap::kNoStack ? b.stack : seg.stack};
    }
    // A driver segment's unit is the segment itself (its one block).
    if (!torch && seg.blocks.empty()) end_stacks_[seg.address] = {seg.total_size, seg.stack};
  }

  // Pass 1: replay from an empty state, learning what existed before the first entry.
  LiveSet ls{flavor_, device, nullptr, {}, {}, nullptr};
  std::vector<Allocation> freed_before;  // freed by the trace, never allocated in it
  std::unordered_set<uint64_t> freed_before_addr;
  rel_.resize(tr.size());
  int64_t rel = 0;
  int64_t max_rel = 0;
  std::ptrdiff_t max_idx = -1;
  for (size_t i = 0; i < tr.size(); ++i) {
    const auto& e = tr[i];
    if (i > 0 && e.time_us < tr[i - 1].time_us) sorted_ = false;
    if (removes(flavor_, e.action) && !ls.live.count(e.addr) &&
        !(e.action == snap::Action::kSegmentUnmap && [&] {
          for (const auto& [a, u] : ls.live)
            if (u.addr < e.addr + e.size && e.addr < u.addr + u.size) return true;
          return false;
        }())) {
      if (freed_before_addr.insert(e.addr).second) {
        freed_before.push_back({device, e.addr, snap::held_bytes(e), snap::kNoStack, true,
                                is_pytorch(flavor_, e.source), 0});
        rel = wrap_sub(rel, static_cast<int64_t>(snap::held_bytes(e)));
      }
    } else {
      rel = wrap_add(rel, ls.apply(e, i + 1 < tr.size() ? &tr[i + 1] : nullptr));
    }
    if (adds(flavor_, e.action)) ++tl_.allocations;
    if (removes(flavor_, e.action)) ++tl_.frees;
    if (is_request(flavor_, e)) ++tl_.requests;
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
  }

  // What the end state holds that the trace did not make was there from the start.
  for (const auto& seg : s.segments) {
    if (seg.device != device) continue;
    const bool pt = torch || seg.source == snap::Source::kPytorch;
    if (torch) {
      for (const auto& b : seg.blocks) {
        if (!active(b) || ls.live.count(b.address) || freed_before_addr.count(b.address)) continue;
        start_live_.push_back({device, b.address, block_bytes(!labelled, b),
                               b.stack != snap::kNoStack ? b.stack : seg.stack, false, true, 0});
      }
    } else if (!ls.live.count(seg.address) && !freed_before_addr.count(seg.address)) {
      bool covered = false;  // a mapping the trace made in pieces
      for (const auto& [a, u] : ls.live)
        if (u.addr >= seg.address && u.addr < seg.address + seg.total_size) covered = true;
      if (!covered)
        start_live_.push_back({device, seg.address, seg.total_size, seg.stack, false, pt, 0});
    }
  }
  for (auto& a : freed_before) start_live_.push_back(a);
  for (const auto& a : start_live_) tl_.start_bytes += a.size;
  if (!torch) fill_tensors();

  tl_.trace = {bytes_after(max_idx), time_after(max_idx), max_idx};
  tl_.end_bytes =
      tr.empty() ? tl_.start_bytes : bytes_after(static_cast<std::ptrdiff_t>(tr.size()) - 1);

  // The collector's own summary saw every event, also those a capped trace no longer holds and
  // cuMemCreate'd memory that has no trace entry: its watermark stands beside the trace's.
  if (s.tool) {
    for (const auto& d : s.tool->devices) {
      if (d.device != device) continue;
      if (!tl_.collector_summary) tl_.collector_summary.emplace();
      tl_.collector_summary->raise(d.peak_bytes, d.peak_time_us);
    }
  }
  fill_layers();
}

void DeviceReplay::fill_layers() {
  const auto& tr = *trace_;
  const bool torch = flavor_ == Flavor::kTorch;
  tl_.has_reserved = torch;
  res_rel_.resize(tr.size());
  alc_rel_.resize(tr.size());
  int64_t res = 0, alc = 0;
  for (size_t i = 0; i < tr.size(); ++i) {
    const auto& e = tr[i];
    if (is_pytorch(flavor_, e.source)) {
      tl_.has_reserved = true;
      if (segment_add(e.action)) res = wrap_add(res, static_cast<int64_t>(e.size));
      if (segment_remove(e.action)) res = wrap_sub(res, static_cast<int64_t>(e.size));
      if (e.action == snap::Action::kAlloc)
        alc = wrap_add(alc, static_cast<int64_t>(snap::held_bytes(e)));
      if (e.action == snap::Action::kFreeCompleted)
        alc = wrap_sub(alc, static_cast<int64_t>(snap::held_bytes(e)));
    }
    res_rel_[i] = res;
    alc_rel_[i] = alc;
  }
  uint64_t res_end = 0, alc_end = 0;
  for (const auto& seg : s_.segments) {
    if (seg.device != tl_.device || !(torch || seg.source == snap::Source::kPytorch)) continue;
    tl_.has_reserved = true;
    res_end += seg.total_size;
    for (const auto& b : seg.blocks)
      if (active(b)) alc_end += block_bytes(!blocks_labelled(tr), b);
  }
  reserved_start_ = start_of(res_end, res);
  allocated_start_ = start_of(alc_end, alc);
  tl_.reserved_end_bytes = res_end;
  if (!tl_.has_reserved) fill_pool_layers();

  auto peak_of = [&](auto&& value) {
    Watermark w{value(-1), time_after(-1), -1};
    for (size_t i = 0; i < tr.size(); ++i) {
      const auto at = static_cast<std::ptrdiff_t>(i);
      w.raise(value(at), time_after(at), at);
    }
    return w;
  };
  if (tl_.has_reserved) {
    tl_.reserved = peak_of([&](std::ptrdiff_t i) { return reserved_after(i); });
    tl_.allocated = peak_of([&](std::ptrdiff_t i) { return allocated_after(i); });
  }
  if (torch) {
    tl_.tracked = tl_.reserved;
  } else {
    tl_.tracked = tl_.trace;
  }

  if (s_.tool) {
    for (const auto& m : s_.tool->driver_memory)
      if (m.device == tl_.device) driver_.push_back(m);
    std::stable_sort(driver_.begin(), driver_.end(),
                     [](const auto& a, const auto& b) { return a.time_us < b.time_us; });
    for (const auto& c : s_.tool->contexts)
      if (c.device == tl_.device) contexts_.push_back(c);
    for (const auto& m : driver_) {
      tl_.has_driver = true;
      tl_.driver.raise(m.used_bytes, m.time_us);
    }
  }
}

void DeviceReplay::fill_tensors() {
  for (const auto& seg : s_.segments)
    if (seg.device == tl_.device && seg.source == snap::Source::kPytorch) split_ = true;
  const auto& tr = *trace_;
  for (const auto& e : tr)
    if (e.source == snap::Source::kPytorch) split_ = true;
  if (!split_) return;
  // PyTorch's tensors replayed as in its own files (alloc adds, free_completed removes), from an
  // empty state, to learn which of the end state's blocks were live before the first entry.
  LiveSet ls{Flavor::kTorch, tl_.device, nullptr, {}, {}, nullptr};
  std::unordered_set<uint64_t> freed_before;
  for (const auto& e : tr) {
    if (e.source != snap::Source::kPytorch) continue;
    if (e.action == snap::Action::kFreeCompleted && !ls.live.count(e.addr)) {
      if (freed_before.insert(e.addr).second)
        tensor_start_live_.push_back(
            {tl_.device, e.addr, snap::held_bytes(e), snap::kNoStack, true, true, 0});
      continue;
    }
    ls.apply(e, nullptr);
  }
  for (const auto& seg : s_.segments) {
    if (seg.device != tl_.device || seg.source != snap::Source::kPytorch) continue;
    for (const auto& b : seg.blocks) {
      if (!active(b) || ls.live.count(b.address) || freed_before.count(b.address)) continue;
      tensor_start_live_.push_back({tl_.device, b.address, b.size,
                                    b.stack != snap::kNoStack ? b.stack : seg.stack, false, true,
                                    0});
    }
  }
}

void DeviceReplay::fill_pool_layers() {
  if (!s_.tool || flavor_ != Flavor::kCumemtrace) return;
  for (const auto& m : s_.tool->pool_memory)
    if (m.device == tl_.device) pools_.push_back(m);
  if (pools_.empty()) return;
  std::stable_sort(pools_.begin(), pools_.end(),
                   [](const auto& a, const auto& b) { return a.time_us < b.time_us; });
  tl_.has_reserved = tl_.pool_layer = true;
  const auto& tr = *trace_;
  std::unordered_map<uint64_t, uint64_t> live;    // async allocations by address
  std::unordered_map<uint64_t, uint64_t> latest;  // pool -> its latest sample's reserved bytes
  uint64_t alc = 0, reserved = 0;
  size_t next = 0;
  for (size_t i = 0; i < tr.size(); ++i) {
    const auto& e = tr[i];
    for (; next < pools_.size() && pools_[next].time_us <= e.time_us; ++next) {
      uint64_t& cur = latest[pools_[next].pool];
      reserved = reserved - cur + pools_[next].reserved_bytes;
      cur = pools_[next].reserved_bytes;
    }
    if (e.source == snap::Source::kDriver && e.action == snap::Action::kSegmentAlloc &&
        e.async_pool) {
      if (auto [it, fresh] = live.try_emplace(e.addr, e.size); !fresh) {
        alc -= it->second;
        it->second = e.size;
      }
      alc += e.size;
    } else if (e.source == snap::Source::kDriver && e.action == snap::Action::kSegmentFree) {
      if (auto it = live.find(e.addr); it != live.end()) {
        alc -= it->second;
        live.erase(it);
      }
    }
    alc_rel_[i] = static_cast<int64_t>(alc);
    res_rel_[i] = static_cast<int64_t>(std::max(reserved, alc));
  }
  for (const auto& [addr, size] : live) pool_live_end_.insert(addr);
  reserved_start_ = allocated_start_ = 0;
  tl_.reserved_end_bytes = std::max(pool_reserved_at(std::numeric_limits<int64_t>::max()), alc);
}

std::string DeviceReplay::reserved_owner() const {
  if (tl_.pool_layer && s_.tool && s_.tool->pytorch &&
      s_.tool->pytorch->backend == "cudaMallocAsync")
    return "PyTorch";
  return tl_.pool_layer ? "pool" : "PyTorch";
}

uint64_t DeviceReplay::pool_reserved_at(int64_t time_us) const {
  std::unordered_map<uint64_t, uint64_t> latest;  // pool -> reserved bytes
  for (const auto& m : pools_) {
    if (m.time_us > time_us) break;
    latest[m.pool] = m.reserved_bytes;
  }
  uint64_t sum = 0;
  for (const auto& [pool, bytes] : latest) sum += bytes;
  return sum;
}

int64_t DeviceReplay::time_after(std::ptrdiff_t index) const {
  const auto& tr = *trace_;
  if (tr.empty()) return 0;
  if (index < 0) return tr.front().time_us;
  return tr[static_cast<size_t>(
                std::min<std::ptrdiff_t>(index, static_cast<std::ptrdiff_t>(tr.size()) - 1))]
      .time_us;
}

uint64_t DeviceReplay::bytes_after(std::ptrdiff_t index) const {
  if (index < 0 || rel_.empty()) return tl_.start_bytes;
  index = std::min<std::ptrdiff_t>(index, static_cast<std::ptrdiff_t>(rel_.size()) - 1);
  return from_start(tl_.start_bytes, rel_[static_cast<size_t>(index)]);
}

uint64_t DeviceReplay::reserved_after(std::ptrdiff_t index) const {
  if (index < 0 || res_rel_.empty()) return reserved_start_;
  index = std::min<std::ptrdiff_t>(index, static_cast<std::ptrdiff_t>(res_rel_.size()) - 1);
  return from_start(reserved_start_, res_rel_[static_cast<size_t>(index)]);
}

uint64_t DeviceReplay::allocated_after(std::ptrdiff_t index) const {
  if (index < 0 || alc_rel_.empty()) return allocated_start_;
  index = std::min<std::ptrdiff_t>(index, static_cast<std::ptrdiff_t>(alc_rel_.size()) - 1);
  return from_start(allocated_start_, alc_rel_[static_cast<size_t>(index)]);
}

uint64_t DeviceReplay::tracked_after(std::ptrdiff_t index) const {
  return flavor_ == Flavor::kTorch ? reserved_after(index) : bytes_after(index);
}

std::optional<uint64_t> DeviceReplay::driver_at(int64_t time_us) const {
  auto it =
      std::upper_bound(driver_.begin(), driver_.end(), time_us,
                       [](int64_t t, const snap::DriverMemorySample& m) { return t < m.time_us; });
  if (it == driver_.begin()) return std::nullopt;
  return std::prev(it)->used_bytes;
}

std::optional<uint64_t> DeviceReplay::context_at(int64_t time_us) const {
  if (contexts_.empty()) return std::nullopt;
  uint64_t bytes = 0;
  for (const auto& c : contexts_)
    if (c.live_at(time_us)) bytes += c.bytes;
  return bytes;
}

struct DeviceReplay::Cursor::State {
  LiveSet ls;
  LiveSet tensors;  // splits_tensors(): PyTorch's live tensors
};

DeviceReplay::Cursor::Cursor(const DeviceReplay& r)
    : r_(r),
      st_(new State{LiveSet{r.flavor_, r.tl_.device, &r.end_stacks_, {}, {}, nullptr},
                    LiveSet{Flavor::kTorch, r.tl_.device, nullptr, {}, {}, nullptr}}) {
  st_->ls.live.reserve(r.start_live_.size());
  for (const auto& a : r.start_live_) st_->ls.live.emplace(a.addr, a);
  st_->ls.changes = &changes_;
  for (const auto& a : r.tensor_start_live_) st_->tensors.live.emplace(a.addr, a);
  st_->tensors.changes = &tensor_changes_;
}

DeviceReplay::Cursor::~Cursor() {
  delete st_;
}

bool DeviceReplay::Cursor::step() {
  changes_.clear();
  tensor_changes_.clear();
  const auto& tr = *r_.trace_;
  if (index_ + 1 >= static_cast<std::ptrdiff_t>(tr.size())) return false;
  ++index_;
  const auto i = static_cast<size_t>(index_);
  st_->ls.apply(tr[i], i + 1 < tr.size() ? &tr[i + 1] : nullptr);
  if (r_.split_ && tr[i].source == snap::Source::kPytorch) st_->tensors.apply(tr[i], nullptr);
  return true;
}

std::vector<Allocation> DeviceReplay::Cursor::live() const {
  std::vector<Allocation> out;
  out.reserve(st_->ls.live.size());
  for (const auto& [addr, a] : st_->ls.live) out.push_back(a);
  std::sort(out.begin(), out.end(),
            [](const Allocation& a, const Allocation& b) { return a.addr < b.addr; });
  return out;
}

Attributed DeviceReplay::Cursor::attributed() const {
  Attributed out;
  if (!r_.split_) {
    out.allocations = live();
    return out;
  }
  out.has_cache = true;
  uint64_t segments = 0, tensors = 0;
  for (const auto& [addr, a] : st_->ls.live) {
    if (a.pytorch)
      segments += a.size;
    else
      out.allocations.push_back(a);
  }
  for (const auto& [addr, a] : st_->tensors.live) {
    tensors += a.size;
    out.allocations.push_back(a);
  }
  out.cached_free = segments > tensors ? segments - tensors : 0;
  std::sort(out.allocations.begin(), out.allocations.end(),
            [](const Allocation& a, const Allocation& b) { return a.addr < b.addr; });
  return out;
}

Attributed DeviceReplay::attributed_after(std::ptrdiff_t index) const {
  Cursor c(*this);
  while (c.index() < index && c.step()) {
  }
  return c.attributed();
}

std::vector<Allocation> DeviceReplay::live_after(std::ptrdiff_t index) const {
  Cursor c(*this);
  while (c.index() < index && c.step()) {
  }
  return c.live();
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

Watermark DeviceReplay::peak_between(int64_t t0, int64_t t1) const {
  const std::ptrdiff_t first = index_at_time(t0);
  const std::ptrdiff_t last = index_at_time(t1);
  Watermark p{bytes_after(first), t0, first};
  for (std::ptrdiff_t i = first + 1; i <= last; ++i) p.raise(bytes_after(i), time_after(i), i);
  return p;
}

namespace {

void finish(Breakdown& b, const std::map<std::string, uint64_t>& libs) {
  b.cached_free =
      b.pytorch_reserved > b.pytorch_allocated ? b.pytorch_reserved - b.pytorch_allocated : 0;
  b.free_share = b.pytorch_reserved
                     ? static_cast<double>(b.cached_free) / static_cast<double>(b.pytorch_reserved)
                     : 0.0;
  b.other_libraries = b.tracked > b.pytorch_reserved ? b.tracked - b.pytorch_reserved : 0;
  for (const auto& [lib, bytes] : libs) b.by_library.emplace_back(lib, bytes);
  std::sort(b.by_library.begin(), b.by_library.end(), [](const auto& x, const auto& y) {
    return x.second != y.second ? x.second > y.second : x.first < y.first;
  });
  // NVML is sampled about once a second: a sample below the tracked bytes predates what this
  // moment holds (a short peak between two samples, a pool grown since) and says nothing about
  // it; so does one below the tracked bytes and the contexts in being, which NVML counts too
  // (else "other untracked" would come out negative).
  const uint64_t floor = b.tracked + (b.context ? *b.context : 0);
  if (b.driver_visible && *b.driver_visible < floor) b.driver_visible.reset();
  if (!b.driver_visible) b.context.reset();
  if (b.driver_visible)
    b.untracked =
        wrap_sub(static_cast<int64_t>(*b.driver_visible), static_cast<int64_t>(b.tracked));
  if (b.context) b.other_untracked = wrap_sub(b.untracked, static_cast<int64_t>(*b.context));
}

}  // namespace

Breakdown DeviceReplay::breakdown_after(std::ptrdiff_t index, const SiteTable& sites,
                                        std::string moment) const {
  return breakdown_with(index, live_after(index), sites, std::move(moment));
}

Breakdown DeviceReplay::breakdown_with(std::ptrdiff_t index, const std::vector<Allocation>& live,
                                       const SiteTable& sites, std::string moment) const {
  Breakdown b;
  b.moment = std::move(moment);
  b.reserved_peak = b.moment == "peak" && flavor_ == Flavor::kTorch;
  b.time_us = time_after(index);
  b.tracked = tracked_after(index);
  b.has_pytorch = tl_.has_reserved;
  if (b.has_pytorch) {
    b.pytorch_reserved = reserved_after(index);
    b.pytorch_allocated = allocated_after(index);
  }
  if (tl_.pool_layer) {
    b.reserved_owner = reserved_owner();
    b.tracked = b.tracked - std::min(b.tracked, b.pytorch_allocated) + b.pytorch_reserved;
  }
  std::map<std::string, uint64_t> libs;
  if (flavor_ == Flavor::kCumemtrace) {
    for (const auto& a : live)
      if (!a.pytorch && !(tl_.pool_layer && a.async_pool)) libs[sites.library(a.stack)] += a.size;
  }
  b.driver_visible = driver_at(b.time_us);
  b.context = context_at(b.time_us);
  finish(b, libs);
  return b;
}

Breakdown DeviceReplay::breakdown_at_exit(const SiteTable& sites) const {
  Breakdown b;
  b.moment = "exit";
  const auto& tr = *trace_;
  b.time_us =
      s_.tool && s_.tool->end_time_us ? s_.tool->end_time_us : (tr.empty() ? 0 : tr.back().time_us);
  b.tracked = tracked_after(static_cast<std::ptrdiff_t>(tr.size()) - 1);
  b.has_pytorch = tl_.has_reserved;
  const bool torch = flavor_ == Flavor::kTorch;
  std::map<std::string, uint64_t> libs;
  uint64_t largest = 0, inactive = 0;
  if (tl_.pool_layer) {
    b.reserved_owner = reserved_owner();
    b.pytorch_reserved = tl_.reserved_end_bytes;
    b.pytorch_allocated = allocated_after(static_cast<std::ptrdiff_t>(tr.size()) - 1);
    b.tracked = b.tracked - std::min(b.tracked, b.pytorch_allocated) + b.pytorch_reserved;
  }
  for (const auto& seg : s_.segments) {
    if (seg.device != tl_.device) continue;
    if (tl_.pool_layer && pool_live_end_.count(seg.address)) continue;  // in the pool's reserved
    if (torch || seg.source == snap::Source::kPytorch) {
      b.pytorch_reserved += seg.total_size;
      for (const auto& blk : seg.blocks) {
        if (active(blk)) {
          b.pytorch_allocated += blk.size;
        } else {
          inactive += blk.size;
          largest = std::max(largest, blk.size);
        }
      }
    } else {
      libs[sites.library(seg.stack != snap::kNoStack
                             ? seg.stack
                             : (seg.blocks.empty() ? snap::kNoStack : seg.blocks.front().stack))] +=
          seg.total_size;
    }
  }
  if (torch) b.tracked = b.pytorch_reserved;  // exact at snapshot time
  if (b.has_pytorch && !tl_.pool_layer) b.largest_free_block = largest;
  b.driver_visible = driver_.empty() ? std::nullopt : std::optional(driver_.back().used_bytes);
  b.context = context_at(b.time_us);
  finish(b, libs);
  // The blocks tile the segments, so cached free is exactly the inactive blocks.
  if (b.has_pytorch && !tl_.pool_layer) {
    b.cached_free = inactive;
    b.free_share = b.pytorch_reserved
                       ? static_cast<double>(inactive) / static_cast<double>(b.pytorch_reserved)
                       : 0.0;
  }
  return b;
}

std::vector<Breakdown> DeviceReplay::breakdowns(const SiteTable& sites) const {
  // One pass through the trace serves the peak and every OOM.
  std::vector<std::pair<std::ptrdiff_t, std::string>> moments;
  moments.emplace_back(tl_.tracked.index, "peak");
  const auto& tr = *trace_;
  for (size_t i = 0; i < tr.size(); ++i)
    if (tr[i].action == snap::Action::kOom)
      moments.emplace_back(static_cast<std::ptrdiff_t>(i), "oom");
  std::vector<std::pair<std::ptrdiff_t, size_t>> order;
  for (size_t k = 0; k < moments.size(); ++k) order.emplace_back(moments[k].first, k);
  std::sort(order.begin(), order.end());
  std::vector<Breakdown> out(moments.size());
  Cursor c(*this);
  for (const auto& [index, k] : order) {
    while (c.index() < index && c.step()) {
    }
    out[k] = breakdown_with(index, c.live(), sites, moments[k].second);
    // An OOM entry changes nothing, so the state after it is the state the request met.
    if (moments[k].second == "oom") out[k].oom_requested = tr[static_cast<size_t>(index)].size;
  }
  out.push_back(breakdown_at_exit(sites));
  return out;
}

}  // namespace cumemtrace::analysis
