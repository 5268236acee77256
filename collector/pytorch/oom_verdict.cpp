#include "pytorch/oom_verdict.h"

#include <algorithm>
#include <iterator>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/breakdown_format.h"
#include "analysis/frames.h"
#include "analysis/grouping.h"
#include "pytorch/categories.h"
#include "pytorch/modules.h"
#include "snapshot/size_format.h"

namespace cumemtrace::analysis {

namespace {

using snap::Action;

struct FreeBlocks {
  uint64_t largest = 0, releasable = 0, unreleasable = 0;
  uint64_t allocated = 0;  // from the snapshot's segments: their active blocks
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
        if (b.state == "active_allocated") f.allocated += b.size;
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
FreeBlocks blocks_by_replay(const std::vector<snap::TraceEntry>& tr, size_t index, bool all_pytorch,
                            const torch_alloc::AllocatorConfig& config) {
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
        // Its block (label_block_sizes), else PyTorch's rounding of the request.
        blocks[e.addr] = e.addr + (e.block_units ? snap::block_size(e)
                                                 : torch_alloc::round_size(config, e.size));
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

// "activation 3 MiB at forward (model.py:20)", or without categories "3 MiB at forward (...)".
std::string holder_text(const OomVerdict& v, const SiteBytes& sb) {
  return fmt::format("{}{} at {}", v.categorized ? category_label(sb.category) + " " : "",
                     snap::format_bytes(static_cast<uint64_t>(sb.bytes)), sb.site);
}

// "1,234,567 B": bytes to the byte, for two sizes that print alike.
std::string exact_bytes(uint64_t n) {
  // Appended digit by digit: GCC 12 at -O2 warns a false -Wrestrict on std::string::insert.
  const std::string d = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < d.size(); ++i) {
    if (i && (d.size() - i) % 3 == 0) out += ',';
    out += d[i];
  }
  out += " B";
  return out;
}

// "reserved peak 60 MiB instead of 76 MiB". Equal numbers are no change ("the same reserved
// peak, 60 MiB"), and two that print alike are told apart by their bytes.
std::string peak_change(uint64_t now, uint64_t was) {
  if (now == was) return fmt::format("the same reserved peak, {}", snap::format_bytes(now));
  if (snap::format_bytes(now) == snap::format_bytes(was)) {
    return fmt::format("reserved peak {} instead of {}", exact_bytes(now), exact_bytes(was));
  }
  return fmt::format("reserved peak {} instead of {}", snap::format_bytes(now),
                     snap::format_bytes(was));
}

// How many of the largest holders the exhaustion advice names.
constexpr size_t kHolders = 3;

void judge(OomVerdict& v) {
  v.compacted_free = v.cached_free + v.headroom;
  if (v.compacted_free < v.requested) {
    v.verdict = "exhaustion";
    v.shortfall = v.requested - v.compacted_free;
  } else {
    v.verdict = "fragmentation";
  }
}

void advise(OomVerdict& v, const SiteTable& sites) {
  if (v.verdict == "exhaustion") {
    // Under a budget below the device that was not recorded its headroom is unknown (less than
    // one segment): the shortfall is then an upper bound.
    const bool bound = v.budget_below_device && !v.fraction;
    v.advice.push_back(fmt::format(
        "{} {} more would have had to be free{}: what is live must shrink by that much{}",
        bound ? "up to" : "at least", snap::format_bytes(v.shortfall),
        bound ? " (less the budget's headroom above the reserved bytes, which is "
                "not recorded)"
              : "",
        v.has_cache
            ? fmt::format(" ({} held by live tensors{})", snap::format_bytes(v.allocated),
                          v.other_libraries ? fmt::format(", {} by other libraries",
                                                          snap::format_bytes(v.other_libraries))
                                            : "")
            : ""));
    // What would have to shrink: the largest holders at the OOM, from the ledger's moment.
    std::string holders;
    size_t named = 0;
    uint64_t held = 0;
    for (const auto& sb : v.held.by_site) {
      if (sb.bytes <= 0) continue;
      held += static_cast<uint64_t>(sb.bytes);
      if (named < kHolders) holders += (named++ ? "; " : "") + holder_text(v, sb);
    }
    if (named) {
      v.advice.push_back(fmt::format("what holds it, largest first (to shrink by {} {}): {}",
                                     bound ? "up to" : "at least", snap::format_bytes(v.shortfall),
                                     holders));
    }
    // Exact shortfall larger than everything live: no shrinking would have made room.
    if (!bound && named && held < v.shortfall) {
      v.advice.push_back(fmt::format(
          "freeing everything live ({}) would not have been enough: {} needs a larger budget or "
          "a smaller request",
          snap::format_bytes(held), snap::format_bytes(v.requested)));
    }
  } else {
    if (v.pytorch && v.cache_owner == "PyTorch" && v.expandable_segments == false) {
      const std::string conf = "expandable_segments:True";
      const auto& w = v.whatif;
      if (!w || w->would_succeed) {
        v.advice.push_back(fmt::format(
            "PYTORCH_CUDA_ALLOC_CONF={}: {} was free in the cache but no free block{} holds {}; "
            "an expandable segment grows in place instead",
            conf, snap::format_bytes(v.cached_free),
            v.largest_free ? fmt::format(" (the largest {})", snap::format_bytes(*v.largest_free))
                           : "",
            snap::format_bytes(v.requested)));
      }
      if (w && w->would_succeed) {
        v.advice.push_back(
            fmt::format("under {} this request would have succeeded ({}; replayed from this trace)",
                        conf, peak_change(w->reserved.bytes, w->recorded_reserved.bytes)));
      } else if (w) {
        // The replay says the setting would not have helped: no advice to use it.
        const auto& f = w->first_failing_request;
        const bool earlier = f && f->entry != v.index;
        v.advice.push_back(fmt::format(
            "under {} this request would not have succeeded either{} ({}; replayed from this "
            "trace)",
            conf,
            earlier ? fmt::format(": an earlier request of {} at {} would have failed first",
                                  snap::format_bytes(f->requested), sites.site(f->stack))
                    : "",
            peak_change(w->reserved.bytes, w->recorded_reserved.bytes)));
      }
    }
  }
  if (v.has_cache && v.largest_free && v.cached_free && v.releasable == 0) {
    v.advice.push_back(fmt::format(
        "torch.cuda.empty_cache() cannot help: all {} free in the cache lies in segments that hold "
        "live tensors",
        snap::format_bytes(v.cached_free)));
  }
}

}  // namespace

std::vector<OomVerdict> oom_verdicts(const AnalysedSnapshot& a, const SiteTable& sites) {
  const snap::Snapshot& s = a.snapshot();
  std::vector<OomVerdict> out;
  const bool torch_file = flavor_of(s) == Flavor::kTorch;
  std::optional<bool> expandable;
  torch_alloc::AllocatorConfig config;  // the rules of the run's allocator (defaults if unknown)
  try {
    config = recorded_config(s);
    if ((s.tool && s.tool->pytorch) || (torch_file && !s.allocator_settings.empty())) {
      expandable = config.expandable_segments;
    }
  } catch (const std::exception&) {
    // Settings the rules cannot parse: whether expandable segments were on stays unknown.
    if (s.tool && s.tool->pytorch) expandable = s.tool->pytorch->expandable_segments;
  }
  // Who holds the memory: the ledger's moment (the view's one Phases, the tensors and their
  // categories per device).
  // Made on the first device with an OOM: a snapshot without one costs nothing here.
  const Phases* phases = nullptr;
  // Gradients named by their parameter, as the ledger's moments name them (one line per tensor);
  // the view's one TensorModules.
  const TensorModules* names = nullptr;
  bool categorized = false;
  for (size_t d = 0; d < s.device_traces.size(); ++d) {
    const auto& tr = s.device_traces[d];
    if (std::none_of(tr.begin(), tr.end(),
                     [](const snap::TraceEntry& e) { return e.action == Action::kOom; }))
      continue;
    const DeviceReplay& replay = a.replay(static_cast<int>(d));
    if (!phases) {
      phases = &phases_of(a);
      categorized = labels_categories(s, *phases);
      if (has_module_names(s)) names = &a.derived<TensorModules>();
    }
    const DeviceTensors tensors = device_tensors(s, static_cast<int>(d), *phases);
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
                                  : blocks_by_replay(tr, i, torch_file, config);
        v.blocks_exact = last;
        v.largest_free = f.largest;
        v.releasable = f.releasable;
        v.unreleasable = f.unreleasable;
        if (last) {
          // The segments' own blocks are PyTorch's state: allocated is what its active blocks
          // hold and the cache's free bytes are its free blocks, so the facts add up.
          v.allocated = f.allocated;
          v.cached_free = f.releasable + f.unreleasable;
        }
      }
      const uint64_t held =
          b.driver_visible ? *b.driver_visible : b.tracked + (b.context ? *b.context : 0);
      v.budget = held + v.device_free;
      v.headroom = v.device_free;
      const uint64_t segment = torch_alloc::allocation_size(config, v.requested);
      if (v.pytorch && v.device_free >= segment) {
        // The device had room for the segment PyTorch would have asked for: its allocator
        // refused by a budget of its own (a memory fraction). Recorded: that budget, and the
        // headroom under it; else the reserved bytes are what it had and the headroom left
        // under it was less than one segment, counted as none.
        v.budget_below_device = true;
        v.fraction = memory_fraction_at(s, v.device, e.time_us);
        if (v.fraction) {
          v.budget = v.fraction->allowed_bytes;
          v.headroom = v.budget > v.reserved ? v.budget - v.reserved : 0;
        } else {
          v.budget = v.reserved;
          v.headroom = 0;
        }
      }
      v.categorized = categorized;
      v.phased = phases->automatic();
      v.held =
          moment_at("oom", static_cast<std::ptrdiff_t>(i), *phases, replay, tensors, sites, names);
      if (tensors.lives.empty()) {
        // No PyTorch tensors on the device: the program's own allocations hold it, by site.
        for (const auto& st : by_site(replay.live_after(static_cast<std::ptrdiff_t>(i)), sites)) {
          v.held.by_site.push_back({st.site, snap::Category::kLibrary,
                                    static_cast<int64_t>(st.bytes), st.count, st.stack});
        }
      }
      judge(v);
      if (v.verdict == "fragmentation" && v.pytorch && v.cache_owner == "PyTorch" &&
          v.expandable_segments == false) {
        try {
          std::string why;  // a refusal: nothing is said of the replay
          v.whatif = oom_whatif(s, v.device, i, "expandable_segments:True", &why);
        } catch (const std::exception&) {
          v.whatif.reset();
        }
      }
      advise(v, sites);
      out.push_back(std::move(v));
    }
  }
  return out;
}

std::string oom_verdict_line(const OomVerdict& v) {
  std::string line =
      fmt::format("{}: {} requested, {} free even compacted (", v.verdict,
                  snap::format_bytes(v.requested), snap::format_bytes(v.compacted_free));
  if (v.has_cache) {
    line += fmt::format("cached free {} + ", snap::format_bytes(v.cached_free));
  }
  if (v.fraction) {
    line += fmt::format("headroom {} under the {})", snap::format_bytes(v.headroom),
                        fraction_text(*v.fraction));
  } else {
    line += v.budget_below_device ? "no headroom under a budget below the device)"
                                  : fmt::format("device free {})", snap::format_bytes(v.headroom));
  }
  if (v.largest_free)
    line += fmt::format(", largest free block {}", snap::format_bytes(*v.largest_free));
  return line;
}

namespace {

std::string libraries_text(const std::vector<std::pair<std::string, uint64_t>>& libs, size_t max) {
  std::string t;
  for (size_t i = 0; i < libs.size() && i < max; ++i)
    t += fmt::format("{}{} {}", i ? ", " : "", libs[i].first, snap::format_bytes(libs[i].second));
  if (libs.size() > max) t += fmt::format(", {} more", libs.size() - max);
  return t;
}

}  // namespace

std::vector<std::string> oom_facts(const OomVerdict& v) {
  std::vector<std::string> f;
  f.push_back(fmt::format("{} could not get {}; the device had {} free",
                          v.pytorch ? "PyTorch's caching allocator" : "a driver allocation",
                          snap::format_bytes(v.requested), snap::format_bytes(v.device_free)));
  if (v.fraction) {
    f.push_back(fmt::format("budget: {}: PyTorch refused with {} reserved, {} left under it",
                            fraction_text(*v.fraction), snap::format_bytes(v.reserved),
                            snap::format_bytes(v.headroom)));
  } else if (v.budget_below_device) {
    f.push_back(fmt::format(
        "budget: below the device (a memory fraction): PyTorch refused with {} reserved",
        snap::format_bytes(v.budget)));
  } else {
    f.push_back(fmt::format("budget: {} (held on the device + its free bytes)",
                            snap::format_bytes(v.budget)));
  }
  if (v.has_cache) {
    std::string line = fmt::format("{} reserved {} = allocated {} + cached {} free", v.cache_owner,
                                   snap::format_bytes(v.reserved), snap::format_bytes(v.allocated),
                                   snap::format_bytes(v.cached_free));
    if (v.largest_free) {
      line += fmt::format(
          ", largest free block {} ({})", snap::format_bytes(*v.largest_free),
          v.blocks_exact ? "from the snapshot's segments" : "reconstructed from the trace");
    }
    f.push_back(std::move(line));
    if (v.largest_free) {
      f.push_back(fmt::format(
          "free in segments holding live tensors: {}; in empty segments (releasable): {}",
          snap::format_bytes(v.unreleasable), snap::format_bytes(v.releasable)));
    }
  }
  if (v.other_libraries) {
    f.push_back(fmt::format("other libraries: {} ({})", snap::format_bytes(v.other_libraries),
                            libraries_text(v.by_library, 3)));
  }
  if (v.context) f.push_back(fmt::format("CUDA context: {}", snap::format_bytes(*v.context)));
  return f;
}

std::string oom_held_when(const OomVerdict& v) {
  return v.phased ? fmt::format(" (step {}, {})", v.held.step + 1, phase_name(v.held.phase)) : "";
}

nlohmann::json oom_verdict_json(const OomVerdict& v, const SiteTable& sites, size_t top) {
  using nlohmann::json;
  json libs = json::object();
  for (const auto& [lib, bytes] : v.by_library) libs[lib] = bytes;
  json j = {
      {"device", v.device},
      {"time_us", v.time_us},
      {"verdict", v.verdict},
      {"line", oom_verdict_line(v)},
      {"facts", oom_facts(v)},
      {"source", v.pytorch ? "pytorch" : "driver"},
      {"requested_bytes", v.requested},
      {"device_free_bytes", v.device_free},
      {"budget_bytes", v.budget},
      {"budget_below_device", v.budget_below_device},
      {"memory_fraction", v.fraction ? json{{"fraction", v.fraction->fraction},
                                            {"allowed_bytes", v.fraction->allowed_bytes},
                                            {"device_total_bytes", v.fraction->device_total},
                                            {"time_us", v.fraction->time_us}}
                                     : json(nullptr)},
      {"compacted_free_bytes", v.compacted_free},
      {"shortfall_bytes", v.shortfall},
      {"reserved_bytes", v.has_cache ? json(v.reserved) : json(nullptr)},
      {"allocated_bytes", v.has_cache ? json(v.allocated) : json(nullptr)},
      {"cached_free_bytes", v.cached_free},
      {"largest_free_bytes", v.largest_free ? json(*v.largest_free) : json(nullptr)},
      {"blocks_exact", v.blocks_exact},
      {"unreleasable_free_bytes", v.largest_free ? json(v.unreleasable) : json(nullptr)},
      {"releasable_free_bytes", v.largest_free ? json(v.releasable) : json(nullptr)},
      {"other_libraries", {{"bytes", v.other_libraries}, {"by_library", libs}}},
      {"context_bytes", v.context ? json(*v.context) : json(nullptr)},
      {"held_by_category", v.categorized ? categories_json(v.held.by_category) : json(nullptr)},
      {"held_by_site", sites_json(v.held.by_site, top)},
      {"held_at", v.phased ? json{{"step", v.held.step + 1}, {"phase", phase_name(v.held.phase)}}
                           : json(nullptr)},
      {"advice", v.advice},
      {"site", sites.site(v.stack)},
      {"stack", v.stack}};
  if (v.whatif) {
    j["whatif"] = {{"alloc_conf", v.whatif->alloc_conf},
                   {"would_succeed", v.whatif->would_succeed},
                   {"reserved_peak_bytes", v.whatif->reserved.bytes},
                   {"recorded_reserved_peak_bytes", v.whatif->recorded_reserved.bytes}};
  }
  return j;
}

}  // namespace cumemtrace::analysis
