#include "analysis/oom_verdict.h"

#include <algorithm>
#include <iterator>
#include <map>

#include <fmt/format.h>

#include "analysis/breakdown_format.h"
#include "analysis/frames.h"

namespace cumemtrace::analysis {

namespace {

using snap::Action;

constexpr uint64_t kMiB = uint64_t{1} << 20;

// The size of the segment PyTorch's allocator asks the driver for to serve a request of `size`
// bytes (already rounded by it): get_allocation_size() of c10/cuda/CUDACachingAllocator.cpp.
uint64_t pytorch_segment_size(uint64_t size) {
  if (size <= kMiB) return 2 * kMiB;                       // kSmallSize -> kSmallBuffer
  if (size < 10 * kMiB) return 20 * kMiB;                  // kMinLargeAlloc -> kLargeBuffer
  return (size + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);  // kRoundLarge
}

struct FreeBlocks {
  uint64_t largest = 0, releasable = 0, unreleasable = 0;
};

// Adds the free gaps of the extent [start, end) between `blocks` (live tensor blocks by address).
void add_extent(FreeBlocks& f, uint64_t start, uint64_t end,
                const std::map<uint64_t, uint64_t>& blocks) {
  uint64_t cursor = start, free = 0;
  bool live = false;
  for (auto it = blocks.lower_bound(start); it != blocks.end() && it->first < end; ++it) {
    live = true;
    if (it->first > cursor) {
      free += it->first - cursor;
      f.largest = std::max(f.largest, it->first - cursor);
    }
    cursor = std::max(cursor, std::min(end, it->second));
  }
  if (end > cursor) {
    free += end - cursor;
    f.largest = std::max(f.largest, end - cursor);
  }
  (live ? f.unreleasable : f.releasable) += free;
}

// Exact: the snapshot's own segments of the device, tiled by their blocks.
FreeBlocks blocks_from_segments(const snap::Snapshot& s, int device, bool all_pytorch) {
  FreeBlocks f;
  for (const auto& seg : s.segments) {
    if (seg.device != device || !(all_pytorch || seg.source == snap::Source::kPytorch)) continue;
    uint64_t free = 0;
    bool live = false;
    for (const auto& b : seg.blocks) {
      if (b.state == "inactive") {
        free += b.size;
        f.largest = std::max(f.largest, b.size);
      } else {
        live = true;
      }
    }
    (live ? f.unreleasable : f.releasable) += free;
  }
  return f;
}

// Removes [start, end) from a set of disjoint extents (start -> end), splitting where needed.
void cut(std::map<uint64_t, uint64_t>& runs, uint64_t start, uint64_t end) {
  auto it = runs.lower_bound(start);
  if (it != runs.begin() && std::prev(it)->second > start) --it;
  while (it != runs.end() && it->first < end) {
    const uint64_t s = it->first, e = it->second;
    it = runs.erase(it);
    if (s < start) runs.emplace(s, start);
    if (e > end) it = runs.emplace(end, e).first;
  }
}

// Reconstructed: PyTorch's segments and live tensor blocks after entry `index` of the trace.
FreeBlocks blocks_by_replay(const std::vector<snap::TraceEntry>& tr, size_t index,
                            bool all_pytorch) {
  std::map<uint64_t, uint64_t> segments;  // cudaMalloc'd: start -> end, never merged
  std::map<uint64_t, uint64_t> mapped;    // expandable segments: maximal mapped runs
  std::map<uint64_t, uint64_t> blocks;    // live tensors: start -> end
  for (size_t i = 0; i <= index && i < tr.size(); ++i) {
    const auto& e = tr[i];
    if (!(all_pytorch || e.source == snap::Source::kPytorch)) continue;
    switch (e.action) {
      case Action::kSegmentAlloc:
        segments[e.addr] = e.addr + e.size;
        break;
      case Action::kSegmentFree:
        segments.erase(e.addr);
        break;
      case Action::kSegmentMap: {
        uint64_t start = e.addr, end = e.addr + e.size;
        cut(mapped, start, end);
        // Join the runs it touches: an expandable segment grows in place.
        if (auto after = mapped.find(end); after != mapped.end()) {
          end = after->second;
          mapped.erase(after);
        }
        auto before = mapped.lower_bound(start);
        if (before != mapped.begin() && std::prev(before)->second == start) {
          --before;
          start = before->first;
          mapped.erase(before);
        }
        mapped[start] = end;
        break;
      }
      case Action::kSegmentUnmap:
        cut(mapped, e.addr, e.addr + e.size);
        break;
      case Action::kAlloc:
        blocks[e.addr] = e.addr + (e.size + 511) / 512 * 512;
        break;
      case Action::kFreeCompleted:
        blocks.erase(e.addr);
        break;
      default:
        break;
    }
  }
  FreeBlocks f;
  for (const auto& [start, end] : segments) add_extent(f, start, end, blocks);
  for (const auto& [start, end] : mapped) add_extent(f, start, end, blocks);
  return f;
}

// A driver OOM that PyTorch's allocator met on its way to its own OOM (its cudaMalloc of a
// segment failed, it freed its cache and retried, then raised): the same failure.
bool part_of_pytorch_oom(const std::vector<snap::TraceEntry>& tr, size_t i) {
  if (tr[i].source == snap::Source::kPytorch) return false;
  for (size_t j = i + 1; j < tr.size(); ++j) {
    if (tr[j].source != snap::Source::kPytorch) continue;
    if (tr[j].action == Action::kOom) return true;
    if (tr[j].action == Action::kAlloc) return false;
  }
  return false;
}

void judge(OomVerdict& v) {
  v.compacted_free = v.cached_free + v.headroom;
  if (v.compacted_free < v.requested) {
    v.verdict = "exhaustion";
    v.shortfall = v.requested - v.compacted_free;
    // Under a budget below the device its headroom is not recorded (less than one segment):
    // the shortfall is then an upper bound.
    v.advice.push_back(fmt::format(
        "{} {} more would have had to be free{}: what is live must shrink by that much{}",
        v.budget_below_device ? "up to" : "at least", compact_bytes(v.shortfall),
        v.budget_below_device ? " (less the budget's headroom above the reserved bytes, which is "
                                "not recorded)"
                              : "",
        v.has_cache ? fmt::format(" ({} held by live tensors{})", compact_bytes(v.allocated),
                                  v.other_libraries ? fmt::format(", {} by other libraries",
                                                                  compact_bytes(v.other_libraries))
                                                    : "")
                    : ""));
  } else {
    v.verdict = "fragmentation";
    if (v.pytorch && v.cache_owner == "PyTorch" && v.expandable_segments == false) {
      v.advice.push_back(fmt::format(
          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: {} was free in the cache but no "
          "free block{} holds {}; an expandable segment grows in place instead",
          compact_bytes(v.cached_free),
          v.largest_free ? fmt::format(" (the largest {})", compact_bytes(*v.largest_free)) : "",
          compact_bytes(v.requested)));
    }
  }
  if (v.has_cache && v.largest_free && v.cached_free && v.releasable == 0) {
    v.advice.push_back(fmt::format(
        "torch.cuda.empty_cache() cannot help: all {} free in the cache lies in segments that hold "
        "live tensors",
        compact_bytes(v.cached_free)));
  }
}

}  // namespace

std::vector<OomVerdict> oom_verdicts(const snap::Snapshot& s, const SiteTable& sites) {
  std::vector<OomVerdict> out;
  const bool torch_file = flavor_of(s) == Flavor::kTorch;
  std::optional<bool> expandable;
  if (s.tool && s.tool->pytorch) expandable = s.tool->pytorch->expandable_segments;
  for (size_t d = 0; d < s.device_traces.size(); ++d) {
    const auto& tr = s.device_traces[d];
    if (std::none_of(tr.begin(), tr.end(),
                     [](const snap::TraceEntry& e) { return e.action == Action::kOom; }))
      continue;
    const DeviceReplay replay(s, static_cast<int>(d));
    for (size_t i = 0; i < tr.size(); ++i) {
      const auto& e = tr[i];
      if (e.action != Action::kOom || part_of_pytorch_oom(tr, i)) continue;
      const Breakdown b = replay.breakdown_after(static_cast<std::ptrdiff_t>(i), sites, "oom");
      OomVerdict v;
      v.device = static_cast<int>(d);
      v.index = i;
      v.time_us = e.time_us;
      v.pytorch = torch_file || e.source == snap::Source::kPytorch;
      v.requested = e.size;
      v.device_free = e.device_free;
      v.stack = e.stack;
      v.expandable_segments = expandable;
      v.has_cache = b.has_pytorch;
      if (v.has_cache) {
        v.cache_owner = b.reserved_owner;
        v.reserved = b.pytorch_reserved;
        v.allocated = b.pytorch_allocated;
        v.cached_free = b.cached_free;
      }
      v.other_libraries = b.other_libraries;
      v.by_library = b.by_library;
      v.context = b.context;
      if (v.has_cache && v.cache_owner == "PyTorch") {
        // Nothing on the device changed after the OOM: the snapshot's segments are its state.
        const bool last =
            std::all_of(tr.begin() + static_cast<std::ptrdiff_t>(i) + 1, tr.end(),
                        [](const snap::TraceEntry& x) {
                          return x.action == Action::kOom || x.action == Action::kSnapshot;
                        });
        const FreeBlocks f = last ? blocks_from_segments(s, v.device, torch_file)
                                  : blocks_by_replay(tr, i, torch_file);
        v.blocks_exact = last;
        v.largest_free = f.largest;
        v.releasable = f.releasable;
        v.unreleasable = f.unreleasable;
      }
      const uint64_t held =
          b.driver_visible ? *b.driver_visible : b.tracked + (b.context ? *b.context : 0);
      v.budget = held + v.device_free;
      v.headroom = v.device_free;
      if (v.pytorch && v.device_free >= pytorch_segment_size(v.requested)) {
        // The device had room for the segment PyTorch would have asked for: its allocator
        // refused by a budget of its own (a memory fraction), of which the reserved bytes are
        // what it had; the headroom left under it was less than one segment, counted as none.
        v.budget_below_device = true;
        v.budget = v.reserved;
        v.headroom = 0;
      }
      judge(v);
      out.push_back(std::move(v));
    }
  }
  return out;
}

std::string oom_verdict_line(const OomVerdict& v) {
  std::string line = fmt::format("{}: {} requested, {} free even compacted (", v.verdict,
                                 compact_bytes(v.requested), compact_bytes(v.compacted_free));
  if (v.has_cache) {
    line += fmt::format("cached free {} + ", compact_bytes(v.cached_free));
  }
  line += v.budget_below_device ? "no headroom under a budget below the device)"
                                : fmt::format("device free {})", compact_bytes(v.headroom));
  if (v.largest_free)
    line += fmt::format(", largest free block {}", compact_bytes(*v.largest_free));
  return line;
}

}  // namespace cumemtrace::analysis
