// The what-if replay: see whatif.h.
#include "pytorch/whatif.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <span>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/breakdown_format.h"
#include "analysis/model.h"
#include "snapshot/size_format.h"

namespace cumemtrace::analysis {

namespace {

using snap::Action;
using torch_alloc::AllocatorConfig;
using torch_alloc::Budget;
using torch_alloc::CachingAllocatorModel;
using torch_alloc::SegmentEvent;

bool is_segment(Action a) {
  return a == Action::kSegmentAlloc || a == Action::kSegmentFree || a == Action::kSegmentMap ||
         a == Action::kSegmentUnmap;
}
bool is_release(Action a) {
  return a == Action::kSegmentFree || a == Action::kSegmentUnmap;
}
// The entries the replay steps on: requests and returns to the pool.
bool is_anchor(Action a) {
  return a == Action::kAlloc || a == Action::kFreeCompleted || a == Action::kOom;
}

// A segment PyTorch held before the trace began.
struct Seed {
  uint64_t addr = 0, size = 0, stream = 0;
  bool small = false;
  struct Live {
    uint64_t addr = 0, size = 0, requested = 0;
    bool operator<(const Live& o) const { return addr < o.addr; }
  };
  std::vector<Live> live;
};

// A device's PyTorch entries, with the recorded segment events between its anchors.
struct Stream {
  std::vector<Seed> seeds;
  const std::vector<snap::TraceEntry>* trace = nullptr;
  std::vector<size_t> anchors;  // indices into the trace
  // The segment entries before anchor k: seg_entries[seg_start[k] .. seg_start[k + 1]) (one flat
  // list: a vector per anchor cost a third of the replay).
  std::vector<size_t> seg_entries;
  std::vector<size_t> seg_start{0};
  std::span<const size_t> segments(size_t k) const {
    return {seg_entries.data() + seg_start[k], seg_start[k + 1] - seg_start[k]};
  }
  std::optional<size_t> first_oom;  // ordinal of the first oom anchor
};

Stream stream_of(const snap::Snapshot& s, int device) {
  Stream st;
  st.trace = &s.device_traces[static_cast<size_t>(device)];
  const bool all = flavor_of(s) == Flavor::kTorch;
  for (size_t i = 0; i < st.trace->size(); ++i) {
    const auto& e = (*st.trace)[i];
    if (!all && e.source != snap::Source::kPytorch) continue;
    if (is_segment(e.action)) {
      st.seg_entries.push_back(i);
    } else if (is_anchor(e.action)) {
      if (e.action == Action::kOom && !st.first_oom) st.first_oom = st.anchors.size();
      st.anchors.push_back(i);
      st.seg_start.push_back(st.seg_entries.size());
    }
  }
  st.seg_start.push_back(st.seg_entries.size());
  return st;
}

std::string event_text(Action a, uint64_t size) {
  return fmt::format("{} {}", snap::action_name(a), snap::format_bytes(size));
}

// Refuses a stream that cannot be the allocator's whole history on the device, and finds the
// segments PyTorch held before it began (the snapshot's segments the trace never made, with the
// blocks live in them that the trace never allocated: the model, for example, moved to the GPU
// before _record_memory_history was called).
void check_complete(const snap::Snapshot& s, Stream& st, int device) {
  std::unordered_set<uint64_t> tensors, segments;
  for (size_t k = 0; k <= st.anchors.size(); ++k) {
    for (size_t i : st.segments(k)) {
      const auto& e = (*st.trace)[i];
      if (!is_release(e.action)) segments.insert(e.addr);
    }
    if (k < st.anchors.size() && (*st.trace)[st.anchors[k]].action == Action::kAlloc) {
      tensors.insert((*st.trace)[st.anchors[k]].addr);
    }
  }
  std::unordered_set<uint64_t> seeded;
  int64_t reserved = 0;
  for (const auto& g : s.segments) {
    if (g.device == device && g.private_pool) {
      throw CannotReplay(fmt::format(
          "device {}: the segment at {:#x} is a private pool's (segment_pool_id: a CUDA graph's "
          "capture or a MemPool): the replay models PyTorch's default pools only",
          device, g.address));
    }
    if (g.device != device || segments.count(g.address)) continue;
    if (flavor_of(s) == Flavor::kCumemtrace && g.source != snap::Source::kPytorch) continue;
    if (g.is_expandable) {
      throw CannotReplay(fmt::format(
          "device {}: the expandable segment at {:#x} was mapped before the trace began", device,
          g.address));
    }
    Seed seed{g.address, g.total_size, g.stream, g.segment_type == "small", {}};
    for (const auto& b : g.blocks) {
      if (b.state != "inactive" && !tensors.count(b.address)) {
        seed.live.push_back({b.address, b.size, b.requested_size});
      }
    }
    std::sort(seed.live.begin(), seed.live.end());
    seeded.insert(g.address);
    reserved += static_cast<int64_t>(g.total_size);
    st.seeds.push_back(std::move(seed));
  }
  std::unordered_set<uint64_t> live;
  for (size_t k = 0; k <= st.anchors.size(); ++k) {
    for (size_t i : st.segments(k)) {
      const auto& e = (*st.trace)[i];
      if (e.action == Action::kSegmentFree && !segments.count(e.addr) && !seeded.count(e.addr)) {
        throw CannotReplay(fmt::format(
            "device {}: entry {} frees a segment at {:#x} that PyTorch reserved before the trace "
            "began and no longer holds at its end",
            device, i, e.addr));
      }
      reserved +=
          is_release(e.action) ? -static_cast<int64_t>(e.size) : static_cast<int64_t>(e.size);
      if (reserved < 0) {
        throw CannotReplay(fmt::format(
            "device {}: entry {} releases {} PyTorch never reserved in this trace: the trace "
            "starts after PyTorch had reserved memory",
            device, i, snap::format_bytes(e.size)));
      }
    }
    if (k == st.anchors.size()) break;
    const auto& e = (*st.trace)[st.anchors[k]];
    if (e.action == Action::kAlloc) {
      live.insert(e.addr);
    } else if (e.action == Action::kFreeCompleted && !live.erase(e.addr)) {
      throw CannotReplay(fmt::format(
          "device {}: entry {} frees a tensor at {:#x} that the trace never allocated: the "
          "trace starts after the program did (PyTorch's max_entries ring, or a capture that "
          "attached late)",
          device, st.anchors[k], e.addr));
    }
  }
}

// The model's live blocks by the address the trace gave them: block id, bytes requested.
using Blocks = std::unordered_map<uint64_t, std::pair<int32_t, uint64_t>>;

// The model in the state before the trace: the seeds' segments and live blocks.
void seed(CachingAllocatorModel& m, const Stream& st, Blocks& blocks, uint64_t& requested) {
  for (const auto& sd : st.seeds) {
    std::vector<std::pair<uint64_t, uint64_t>> live;
    for (const auto& b : sd.live) live.push_back({b.addr, b.size});
    const auto ids = m.seed_segment(sd.addr, sd.size, sd.stream, sd.small, live);
    for (size_t i = 0; i < ids.size(); ++i) {
      blocks[sd.live[i].addr] = {ids[i], sd.live[i].requested};
      requested += sd.live[i].requested;
    }
  }
}

// Returns the block the trace frees at `addr` to the model, and its requested bytes; an address
// the model holds no block for returns nothing.
void free_block(CachingAllocatorModel& m, Blocks& blocks, uint64_t addr, uint64_t& requested) {
  auto it = blocks.find(addr);
  if (it == blocks.end()) return;
  m.free(it->second.first);
  requested -= it->second.second;
  blocks.erase(it);
}

struct Plan {
  std::set<size_t> empty_cache;  // anchor ordinals before which empty_cache() was called
  std::optional<Budget> budget;  // the recorded run's (what its replay runs under)
  std::string budget_source;
  std::optional<Budget> whatif_budget;  // the other configurations': --budget, else the recorded
  uint64_t recorded_segment_events = 0;
};

// One replay of the stream under a configuration, up to and including anchor `last`.
struct Replay {
  const Stream& st;
  const AllocatorConfig& config;
  std::optional<Budget> budget;
  WhatIfResult r;
  uint64_t requested = 0;

  void peaks(const CachingAllocatorModel& m, int64_t t) {
    if (r.reserved.raise(m.reserved(), t)) r.fragmentation_bytes = m.inactive_split();
    r.allocated.raise(m.allocated(), t);
    r.requested.raise(requested, t);
  }
};

// The addresses a replay gives the segments it makes: the recorded address of a segment the
// recording made before the same request with the same kind and size (so that best fit breaks
// ties as the recorded run did, and a configuration that changes nothing replays the recorded
// run exactly), else the model's own (0). An address still held in the model (the replay went
// another way) is not handed out twice.
struct RecordedAddresses {
  const Stream& st;
  size_t pos = 0;
  std::vector<bool> used;
  std::unordered_set<uint64_t> held;  // cudaMalloc'd segments and expandable ranges the model holds

  void at(size_t k) {
    pos = k;
    used.assign(st.segments(k).size(), false);
  }
  uint64_t operator()(uint64_t size, bool expandable) {
    const auto rec = st.segments(pos);
    for (size_t j = 0; j < rec.size(); ++j) {
      const auto& e = (*st.trace)[rec[j]];
      if (used[j] || held.count(e.addr)) continue;
      if ((!expandable && e.action == Action::kSegmentAlloc && e.size == size) ||
          (expandable && e.action == Action::kSegmentMap)) {
        used[j] = true;
        held.insert(e.addr);
        return e.addr;
      }
    }
    return 0;
  }
  // The model's segment events of a step: a freed segment's address may come again.
  void saw(const std::vector<SegmentEvent>& events) {
    for (const auto& e : events)
      if (e.action == Action::kSegmentFree) held.erase(e.addr);
  }
};

// The replay of a configuration other than the recorded one (or the recorded one under another
// budget): the plan's empty_cache calls, stops at the first failure.
WhatIfResult replay(const Stream& st, const AllocatorConfig& c, const Plan& plan, size_t last,
                    std::optional<Budget> budget) {
  RecordedAddresses addresses{st, 0, {}, {}};
  CachingAllocatorModel::Hooks hooks;
  uint64_t own_addresses = 0;
  hooks.segment_address = [&](uint64_t size, uint64_t, bool expandable) {
    const uint64_t a = addresses(size, expandable);
    if (!a && !expandable) ++own_addresses;  // an expandable range has no equal to tie with
    return a;
  };
  CachingAllocatorModel m(c, budget, hooks);
  Replay rp{st, c, budget, {}, 0};
  Blocks blocks;
  seed(m, st, blocks, rp.requested);
  for (const auto& sd : st.seeds) addresses.held.insert(sd.addr);
  rp.peaks(m, 0);
  auto events = [&] {
    const auto got = m.take_events();
    addresses.saw(got);
    return got.size();
  };
  for (size_t k = 0; k < st.anchors.size() && k <= last; ++k) {
    addresses.at(k);
    const auto& e = (*st.trace)[st.anchors[k]];
    if (plan.empty_cache.count(k)) {
      m.empty_cache();
      rp.peaks(m, e.time_us);
    }
    if (e.action == Action::kFreeCompleted) {
      free_block(m, blocks, e.addr, rp.requested);
    } else {
      const int32_t b = m.malloc(e.size, e.stream);
      if (b < 0) {
        rp.r.first_failing_request =
            FailingRequest{st.anchors[k], e.size,  torch_alloc::round_size(c, e.size),
                           e.time_us,     e.stack, e.action == Action::kOom};
        rp.r.oom_fragmentation_bytes = m.inactive_split();
        rp.r.segment_events += events();
        rp.peaks(m, e.time_us);
        break;
      }
      if (e.action == Action::kAlloc) {
        blocks[e.addr] = {b, e.size};
      }
      rp.requested += e.size;
    }
    rp.r.segment_events += events();
    rp.peaks(m, e.time_us);
  }
  if (!rp.r.first_failing_request && last >= st.anchors.size() &&
      plan.empty_cache.count(st.anchors.size())) {  // empty_cache() after the last request
    addresses.at(st.anchors.size());
    m.empty_cache();
    rp.r.segment_events += events();
  }
  rp.r.own_address_segments = own_addresses;
  rp.r.fragmentation_share = rp.r.reserved.bytes ? static_cast<double>(rp.r.fragmentation_bytes) /
                                                       static_cast<double>(rp.r.reserved.bytes)
                                                 : 0;
  return rp.r;
}

// The budget the recording shows (whatif.h): the memory fraction the capture recorded, else
// what the first OOM shows.
void recorded_budget(const Stream& st, const AllocatorConfig& c, const snap::Snapshot& s,
                     Plan& plan, int device) {
  if (!st.anchors.empty()) {
    const auto& at = (*st.trace)[st.anchors[st.first_oom ? *st.first_oom : st.anchors.size() - 1]];
    if (const auto f = memory_fraction_at(s, device, at.time_us)) {
      plan.budget = Budget{f->allowed_bytes, true};
      plan.budget_source = fraction_text(*f);
      return;
    }
  }
  if (!st.first_oom) {
    plan.budget_source = "none: the trace has no OOM (pass --budget SIZE to set one)";
    return;
  }
  int64_t reserved = 0;
  for (const auto& sd : st.seeds) reserved += static_cast<int64_t>(sd.size);
  for (size_t k = 0; k <= *st.first_oom; ++k) {
    for (size_t i : st.segments(k)) {
      const auto& e = (*st.trace)[i];
      reserved +=
          is_release(e.action) ? -static_cast<int64_t>(e.size) : static_cast<int64_t>(e.size);
    }
  }
  const auto& oom = (*st.trace)[st.anchors[*st.first_oom]];
  const uint64_t held = static_cast<uint64_t>(std::max<int64_t>(reserved, 0));
  const uint64_t alloc = torch_alloc::allocation_size(c, oom.size);
  const std::string at = format_time(oom.time_us, time_origin(s));
  if (oom.device_free >= alloc) {
    plan.budget = Budget{held + alloc - 1, true};
    plan.budget_source = fmt::format(
        "the largest per-process limit that fails the OOM at {} (PyTorch reserved {}, a {} "
        "segment needed, the device had {} free: a memory fraction)",
        at, snap::format_bytes(held), snap::format_bytes(alloc),
        snap::format_bytes(oom.device_free));
  } else {
    plan.budget = Budget{held + oom.device_free, false};
    plan.budget_source =
        fmt::format("PyTorch reserved {} + {} free on the device at the OOM at {}",
                    snap::format_bytes(held), snap::format_bytes(oom.device_free), at);
  }
}

// The recorded run's budget, and the other configurations': --budget (`given`), else the same.
void derive_budget(const Stream& st, const AllocatorConfig& c, const snap::Snapshot& s, Plan& plan,
                   std::optional<uint64_t> given, int device) {
  recorded_budget(st, c, s, plan, device);
  plan.whatif_budget = plan.budget;
  if (given) plan.whatif_budget = Budget{*given, false};
}

// Fails the replay where the model's segment events before anchor `k` (its request, or the end)
// are not the recorded ones: its predictions would not hold for this run.
void compare_segments(const Stream& st, size_t k, const std::vector<SegmentEvent>& got, int device,
                      Plan& plan) {
  const auto rec = st.segments(k);
  const size_t n = std::max(rec.size(), got.size());
  for (size_t j = 0; j < n; ++j) {
    const bool have_rec = j < rec.size(), have_got = j < got.size();
    if (have_rec && have_got && (*st.trace)[rec[j]].action == got[j].action &&
        (*st.trace)[rec[j]].size == got[j].size) {
      continue;
    }
    const std::string where =
        k < st.anchors.size() ? fmt::format("before entry {}", st.anchors[k]) : "at the end";
    throw CannotReplay(fmt::format(
        "device {}: the model of torch {}'s allocator does not reproduce the recorded segments "
        "({}: recorded {}, model {}); its predictions would not hold for this run",
        device, torch_alloc::kModelledTorch, where,
        have_rec ? event_text((*st.trace)[rec[j]].action, (*st.trace)[rec[j]].size) : "nothing",
        have_got ? event_text(got[j].action, got[j].size) : "nothing"));
  }
  plan.recorded_segment_events += rec.size();
}

// Whether the `releases` segment releases recorded before request `e` were the allocator's own
// retry (after a failed request, or for one that would not fit the budget) rather than a call of
// empty_cache(), which the other configurations' replays must repeat.
bool releases_are_retry(const Stream& st, const AllocatorConfig& c, const Plan& plan,
                        const CachingAllocatorModel& m, const snap::TraceEntry* e,
                        std::span<const size_t> rec, size_t releases) {
  if (e && e->action == Action::kOom) return true;
  if (!e || e->action != Action::kAlloc || releases >= rec.size() || !plan.budget) return false;
  uint64_t wanted = 0;
  for (size_t j = releases; j < rec.size(); ++j) wanted += (*st.trace)[rec[j]].size;
  if (plan.budget->fraction) {
    wanted = torch_alloc::allocation_size(c, torch_alloc::round_size(c, e->size));
  }
  return m.reserved() + wanted > plan.budget->bytes ||
         (plan.budget->fraction && c.garbage_collection_threshold > 0);
}

// Request `e` (anchor `k`) under the recorded configuration; the model must succeed and fail
// where the recording did.
void replay_recorded_request(const Stream& st, const AllocatorConfig& c, const Plan& plan,
                             CachingAllocatorModel& m, Replay& rp, Blocks& blocks,
                             const snap::TraceEntry& e, size_t k, size_t last, int device,
                             std::vector<uint64_t>* sizes) {
  if (e.action == Action::kFreeCompleted) {
    if (auto it = blocks.find(e.addr); sizes && it != blocks.end()) {
      (*sizes)[st.anchors[k]] = m.block_size(it->second.first);
    }
    return free_block(m, blocks, e.addr, rp.requested);
  }
  const int32_t b = m.malloc(e.size, e.stream);
  if (sizes && b >= 0) (*sizes)[st.anchors[k]] = m.block_size(b);
  if (e.action == Action::kOom && b >= 0) {
    throw CannotReplay(fmt::format(
        "device {}: the model finds room for the request of {} that failed at entry {} under "
        "the budget the recording shows ({}): the run's budget was not what the recording shows "
        "(a memory fraction cumemtrace did not record)",
        device, snap::format_bytes(e.size), st.anchors[k],
        plan.budget ? snap::format_bytes(plan.budget->bytes) : "none"));
  }
  if (e.action == Action::kAlloc && b < 0) {
    throw CannotReplay(fmt::format(
        "device {}: the model runs out of memory at entry {} ({}) where the recorded run did "
        "not, under a budget of {} ({}): the run's budget was not what the recording shows",
        device, st.anchors[k], snap::format_bytes(e.size),
        plan.budget ? snap::format_bytes(plan.budget->bytes) : "none", plan.budget_source));
  }
  if (b < 0) {
    if (k <= last && !rp.r.first_failing_request) {
      rp.r.first_failing_request = FailingRequest{
          st.anchors[k], e.size, torch_alloc::round_size(c, e.size), e.time_us, e.stack, true};
    }
  } else {
    blocks[e.addr] = {b, e.size};
    rp.requested += e.size;
  }
}

// The replay under the recorded configuration: it uses the recorded segment addresses (so that
// best fit breaks ties as it did), finds the empty_cache() calls, and checks that every segment
// event comes out as recorded. Fills `plan`; returns the result over the window.
// `sizes` (when given, one per trace entry): each request's and return's block size.
WhatIfResult replay_recorded(const Stream& st, const AllocatorConfig& c, Plan& plan, size_t last,
                             int device, std::vector<uint64_t>* sizes = nullptr) {
  size_t pos = 0;
  std::vector<bool> used;
  CachingAllocatorModel::Hooks hooks;
  hooks.segment_address = [&](uint64_t size, uint64_t, bool expandable) -> uint64_t {
    const auto rec = st.segments(pos);
    for (size_t j = 0; j < rec.size(); ++j) {
      const auto& e = (*st.trace)[rec[j]];
      if (used[j]) continue;
      if (!expandable && e.action == Action::kSegmentAlloc && e.size == size) {
        used[j] = true;
        return e.addr;
      }
      if (expandable && e.action == Action::kSegmentMap) return e.addr;
    }
    return 0;
  };
  CachingAllocatorModel m(c, plan.budget, hooks);
  Replay rp{st, c, plan.budget, {}, 0};
  Blocks blocks;
  seed(m, st, blocks, rp.requested);
  rp.peaks(m, 0);
  for (size_t k = 0; k <= st.anchors.size(); ++k) {
    pos = k;
    const auto rec = st.segments(k);
    used.assign(rec.size(), false);
    const snap::TraceEntry* e = k < st.anchors.size() ? &(*st.trace)[st.anchors[k]] : nullptr;
    // Leading releases: a request's retry, or a call of empty_cache() before it.
    size_t releases = 0;
    while (releases < rec.size() && is_release((*st.trace)[rec[releases]].action)) ++releases;
    if (releases > 0 && !releases_are_retry(st, c, plan, m, e, rec, releases)) {
      plan.empty_cache.insert(k);
      m.empty_cache();
      if (k <= last) rp.peaks(m, e ? e->time_us : 0);
    }
    if (!e) {  // empty_cache() after the last request
      const auto got = m.take_events();
      compare_segments(st, k, got, device, plan);
      if (k <= last) rp.r.segment_events += got.size();
      break;
    }
    replay_recorded_request(st, c, plan, m, rp, blocks, *e, k, last, device, sizes);
    const auto got = m.take_events();
    compare_segments(st, k, got, device, plan);
    if (k <= last) {
      rp.r.segment_events += got.size();
      rp.peaks(m, e->time_us);
    }
  }
  rp.r.recorded = true;
  rp.r.alloc_conf = c.text;
  rp.r.fragmentation_share = rp.r.reserved.bytes ? static_cast<double>(rp.r.fragmentation_bytes) /
                                                       static_cast<double>(rp.r.reserved.bytes)
                                                 : 0;
  return rp.r;
}

bool truthy(const std::string& v) {
  return v == "True" || v == "true" || v == "1";
}

std::vector<int> pytorch_devices(const snap::Snapshot& s) {
  std::vector<int> out;
  const bool all = flavor_of(s) == Flavor::kTorch;
  for (size_t d = 0; d < s.device_traces.size(); ++d) {
    for (const auto& e : s.device_traces[d]) {
      if ((all || e.source == snap::Source::kPytorch) &&
          (is_anchor(e.action) || is_segment(e.action))) {
        out.push_back(static_cast<int>(d));
        break;
      }
    }
  }
  return out;
}

void check_snapshot(const snap::Snapshot& s) {
  if (s.tool) {
    const auto& t = *s.tool;
    if (t.events_dropped) {
      throw CannotReplay(
          fmt::format("{} events were dropped while recording: the request stream "
                      "is incomplete",
                      t.events_dropped));
    }
    if (t.trace_entries_dropped) {
      throw CannotReplay(
          fmt::format("the oldest {} trace entries were dropped "
                      "(--max-trace-events): the request stream is incomplete",
                      t.trace_entries_dropped));
    }
    if (!t.ring_error.empty()) {
      throw CannotReplay("the collector stopped reading the ring early (" + t.ring_error +
                         "): the request stream is incomplete");
    }
    if (flavor_of(s) == Flavor::kCumemtrace) {
      if (!t.pytorch || t.pytorch->capture != "blocks") {
        throw CannotReplay("the snapshot has no PyTorch allocator events" +
                           (t.pytorch
                                ? " (capture: " + t.pytorch->capture +
                                      (t.pytorch->why.empty() ? "" : ", " + t.pytorch->why) + ")"
                                : std::string(" (the program did not use PyTorch)")));
      }
      if (const std::string why = torch_alloc::unmodelled_torch(t.pytorch->version); !why.empty()) {
        throw CannotReplay(why);
      }
      // PyTorch's default pools only: a private pool's segments are kept apart from them.
      if (const auto& pools = t.pytorch->private_pools; !pools.empty()) {
        throw CannotReplay(fmt::format(
            "the run allocated from a private pool ({} at {}): the replay models PyTorch's "
            "default pools only, not CUDA graph or MemPool private pools",
            pools.front().kind == "cuda_graph" ? "a CUDA graph's capture" : "a MemPool",
            format_time(pools.front().time_us, time_origin(s))));
      }
      // The replay models one configuration: a change after the capture attached (its first
      // alloc_confs item) is refused by name rather than replayed as the first.
      const auto& confs = t.pytorch->alloc_confs;
      for (size_t i = 1; i < confs.size(); ++i) {
        if (confs[i].alloc_conf != confs.front().alloc_conf) {
          throw CannotReplay(fmt::format(
              "the allocator's settings changed while the program ran (to '{}' at {}): the "
              "replay models one configuration",
              confs[i].alloc_conf, format_time(confs[i].time_us, time_origin(s))));
        }
      }
    }
  }
}

// The smallest budget (a multiple of 2 MiB: every segment and page is one) under which the
// window replays without a failed request, by bisection on the replay: an unbounded replay's
// reserved peak always fits, nothing does not. The bisection takes fitting as growing with the
// budget, as it does for the allocator's one limit (garbage_collection_threshold aside).
uint64_t smallest_budget(const Stream& st, const AllocatorConfig& c, const Plan& plan, size_t last,
                         bool fraction) {
  constexpr uint64_t kStep = torch_alloc::kSmallBuffer;
  const WhatIfResult unbounded = replay(st, c, plan, last, std::nullopt);
  uint64_t hi = (unbounded.reserved.bytes + kStep - 1) / kStep * kStep, lo = 0;
  while (hi - lo > kStep) {
    const uint64_t mid = lo + (hi - lo) / 2 / kStep * kStep;
    const WhatIfResult r = replay(st, c, plan, last, Budget{mid, fraction});
    (r.first_failing_request ? lo : hi) = mid;
  }
  return hi;
}

// Sweep order: no OOM first, then the smaller reserved peak, then the less fragmentation (at the
// OOM for one that fails, at the peak otherwise).
void rank_results(std::vector<WhatIfResult>& results) {
  std::vector<WhatIfResult*> order;
  for (auto& r : results) order.push_back(&r);
  auto frag = [](const WhatIfResult* r) {
    return r->first_failing_request ? r->oom_fragmentation_bytes : r->fragmentation_bytes;
  };
  std::stable_sort(order.begin(), order.end(), [&](const WhatIfResult* a, const WhatIfResult* b) {
    const bool fa = a->first_failing_request.has_value(), fb = b->first_failing_request.has_value();
    if (fa != fb) return !fa;
    if (a->reserved.bytes != b->reserved.bytes) return a->reserved.bytes < b->reserved.bytes;
    return frag(a) < frag(b);
  });
  for (size_t i = 0; i < order.size(); ++i) order[i]->rank = i + 1;
}

}  // namespace

AllocatorConfig recorded_config(const snap::Snapshot& s) {
  std::string error;
  if (flavor_of(s) == Flavor::kCumemtrace) {
    AllocatorConfig c;
    const auto& p = s.tool ? s.tool->pytorch : std::nullopt;
    if (p && !p->alloc_confs.empty()) {
      const std::string& text = p->alloc_confs.front().alloc_conf;
      auto parsed = torch_alloc::parse_alloc_conf(text, &error);
      if (!parsed) throw CannotReplay("the recorded " + error);
      c = std::move(*parsed);
    }
    if (p && p->expandable_segments) c.expandable_segments = true;
    return c;
  }
  const auto& a = s.allocator_settings;
  std::string text;
  if (auto it = a.find("PYTORCH_CUDA_ALLOC_CONF"); it != a.end()) text = it->second;
  auto c = torch_alloc::parse_alloc_conf(text, &error);
  if (!c) throw CannotReplay("the recorded " + error);
  // The parsed values are the allocator's state at the snapshot (settings changed at run time
  // included): they win over the environment's text.
  if (auto it = a.find("expandable_segments"); it != a.end())
    c->expandable_segments = truthy(it->second);
  if (auto it = a.find("max_split_size"); it != a.end()) {
    const long long v = std::strtoll(it->second.c_str(), nullptr, 10);
    c->max_split_size = v <= 0 ? UINT64_MAX : static_cast<uint64_t>(v);
  }
  if (auto it = a.find("garbage_collection_threshold"); it != a.end()) {
    c->garbage_collection_threshold = std::strtod(it->second.c_str(), nullptr);
  }
  return *c;
}

std::optional<snap::MemoryFractionChange> memory_fraction_at(const snap::Snapshot& s, int device,
                                                             int64_t time_us) {
  std::optional<snap::MemoryFractionChange> out;
  if (!s.tool || !s.tool->pytorch) return out;
  for (const auto& m : s.tool->pytorch->memory_fractions) {
    if (m.device == device && m.time_us <= time_us) out = m;
  }
  return out;
}

std::string fraction_text(const snap::MemoryFractionChange& m) {
  return fmt::format("{} allowed by the memory fraction {} of {}",
                     snap::format_bytes(m.allowed_bytes), m.fraction,
                     snap::format_bytes(m.device_total));
}

std::vector<WhatIfDevice> replay_whatif(const snap::Snapshot& s, const WhatIfOptions& o) {
  std::vector<AllocatorConfig> confs;
  std::vector<std::string> texts = o.alloc_confs;
  if (o.sweep) texts.insert(texts.end(), kSweep.begin(), kSweep.end());
  for (const auto& text : texts) {
    std::string error;
    auto c = torch_alloc::parse_alloc_conf(text, &error);
    if (!c) throw std::invalid_argument(error);
    confs.push_back(std::move(*c));
  }
  check_snapshot(s);
  const AllocatorConfig recorded = recorded_config(s);
  const auto devices = pytorch_devices(s);
  if (devices.empty()) throw CannotReplay("the snapshot has no PyTorch allocator events");
  std::vector<WhatIfDevice> out;
  for (int d : devices) {
    Stream st = stream_of(s, d);
    check_complete(s, st, d);
    WhatIfDevice w;
    w.device = d;
    if (s.tool && s.tool->pytorch) w.torch_version = s.tool->pytorch->version;
    Plan plan;
    derive_budget(st, recorded, s, plan, o.budget_bytes, d);
    w.budget = plan.whatif_budget;
    w.recorded_budget = plan.budget;
    w.budget_source = plan.budget_source;
    const size_t last = st.first_oom ? *st.first_oom : std::numeric_limits<size_t>::max();
    if (st.first_oom) w.window_end = st.anchors[*st.first_oom];
    w.results.push_back(replay_recorded(st, recorded, plan, last, d));
    w.recorded_segment_events = plan.recorded_segment_events;
    w.empty_cache_calls = plan.empty_cache.size();
    for (size_t k = 0; k < st.anchors.size() && k <= last; ++k) {
      const auto a = (*st.trace)[st.anchors[k]].action;
      w.requests += a == Action::kAlloc || a == Action::kOom;
    }
    if (o.budget_bytes) {
      // The recorded configuration under the budget asked for: what that budget alone does.
      WhatIfResult r = replay(st, recorded, plan, last, plan.whatif_budget);
      r.alloc_conf = recorded.text;
      r.recorded_conf = true;
      w.results.push_back(std::move(r));
    }
    for (const auto& c : confs) {
      WhatIfResult r = replay(st, c, plan, last, plan.whatif_budget);
      r.alloc_conf = c.text;
      w.results.push_back(std::move(r));
    }
    if (o.needs) {
      const bool fraction = plan.whatif_budget && plan.whatif_budget->fraction;
      for (auto& r : w.results) {
        std::string error;
        const auto c = torch_alloc::parse_alloc_conf(r.alloc_conf, &error);
        if (!c) continue;  // recorded_config's parsed values: never refused above
        r.needs_budget_bytes =
            smallest_budget(st, r.recorded ? recorded : *c, plan, last, fraction);
      }
    }
    if (o.sweep) rank_results(w.results);
    out.push_back(std::move(w));
  }
  return out;
}

size_t label_block_sizes(snap::Snapshot& s, std::vector<std::string>* why) {
  size_t labelled = 0;
  std::vector<int> devices;
  AllocatorConfig recorded;
  try {
    check_snapshot(s);
    recorded = recorded_config(s);
    devices = pytorch_devices(s);
  } catch (const CannotReplay& e) {
    if (why && has_pytorch(s)) why->push_back(e.what());
    return 0;
  }
  const bool all = flavor_of(s) == Flavor::kTorch;
  for (int d : devices) {
    auto& tr = s.device_traces[static_cast<size_t>(d)];
    std::vector<uint64_t> sizes(tr.size(), 0);
    try {
      Stream st = stream_of(s, d);
      check_complete(s, st, d);
      Plan plan;
      derive_budget(st, recorded, s, plan, std::nullopt, d);
      replay_recorded(st, recorded, plan, std::numeric_limits<size_t>::max(), d, &sizes);
    } catch (const CannotReplay& e) {
      if (why) why->push_back(e.what());
      continue;
    }
    for (size_t i = 0; i < tr.size(); ++i) {
      auto& e = tr[i];
      if ((all || e.source == snap::Source::kPytorch) &&
          (e.action == Action::kAlloc || e.action == Action::kFreeCompleted)) {
        // Blocks are whole 512 B units; a size that is not (corrupt input) stays unlabelled.
        if (sizes[i] % snap::kBlockUnit == 0 && sizes[i] / snap::kBlockUnit <= UINT32_MAX) {
          e.block_units = static_cast<uint32_t>(sizes[i] / snap::kBlockUnit);
        }
      }
    }
    // A free_requested is of the block its completion returns (the tensor may predate the
    // trace): labelled from the next free_completed at its address.
    std::unordered_map<uint64_t, uint32_t> completes;
    for (size_t i = tr.size(); i-- > 0;) {
      auto& e = tr[i];
      if (!all && e.source != snap::Source::kPytorch) continue;
      if (e.action == Action::kFreeCompleted) {
        completes[e.addr] = e.block_units;
      } else if (e.action == Action::kFreeRequested) {
        if (auto it = completes.find(e.addr); it != completes.end()) e.block_units = it->second;
      } else if (e.action == Action::kAlloc) {
        completes.erase(e.addr);
      }
    }
    ++labelled;
  }
  return labelled;
}

void tile_blocks_as_replayed(snap::Snapshot& s) {
  if (flavor_of(s) != Flavor::kCumemtrace) return;
  for (size_t d = 0; d < s.device_traces.size(); ++d) {
    // The blocks live at the end, by address: each one's last alloc, not completed since.
    std::unordered_map<uint64_t, uint64_t> live;
    for (const auto& e : s.device_traces[d]) {
      if (e.source != snap::Source::kPytorch) continue;
      if (e.action == Action::kAlloc) {
        if (e.block_units) {
          live[e.addr] = snap::block_size(e);
        } else {
          live.erase(e.addr);
        }
      } else if (e.action == Action::kFreeCompleted) {
        live.erase(e.addr);
      }
    }
    if (live.empty()) continue;
    for (auto& seg : s.segments) {
      if (seg.device != static_cast<int>(d) || seg.source != snap::Source::kPytorch) continue;
      std::vector<snap::Block> active;
      for (const auto& b : seg.blocks)
        if (b.state != "inactive") active.push_back(b);
      std::sort(active.begin(), active.end(),
                [](const auto& a, const auto& b) { return a.address < b.address; });
      const uint64_t end = seg.address + seg.total_size;
      std::vector<snap::Block> out;
      uint64_t cursor = seg.address, active_size = 0, allocated_size = 0;
      bool consistent = true;
      for (size_t i = 0; i < active.size() && consistent; ++i) {
        snap::Block b = active[i];
        const uint64_t next = i + 1 < active.size() ? active[i + 1].address : end;
        if (b.address < cursor || b.address >= end || next < b.address) {
          consistent = false;  // overlapping or outside: bad input, the file stays as it is
          break;
        }
        if (auto it = live.find(b.address); it != live.end() && b.address + it->second <= next) {
          b.size = it->second;
        }
        if (b.address > cursor) {
          out.push_back({cursor, b.address - cursor, 0, "inactive", snap::kNoStack});
        }
        cursor = b.address + b.size;
        active_size += b.size;
        if (b.state == "active_allocated") allocated_size += b.size;
        out.push_back(std::move(b));
      }
      if (!consistent || cursor > end) continue;
      if (cursor < end) out.push_back({cursor, end - cursor, 0, "inactive", snap::kNoStack});
      seg.blocks = std::move(out);
      seg.active_size = active_size;
      seg.allocated_size = allocated_size;
    }
  }
}

std::optional<OomWhatIf> oom_whatif(const snap::Snapshot& s, int device, size_t oom_entry,
                                    const std::string& alloc_conf, std::string* why) {
  try {
    std::string error;
    auto c = torch_alloc::parse_alloc_conf(alloc_conf, &error);
    if (!c) throw CannotReplay(error);
    check_snapshot(s);
    if (device < 0 || static_cast<size_t>(device) >= s.device_traces.size()) {
      throw CannotReplay(fmt::format("no trace for device {}", device));
    }
    const AllocatorConfig recorded = recorded_config(s);
    Stream st = stream_of(s, device);
    check_complete(s, st, device);
    const auto at = std::find(st.anchors.begin(), st.anchors.end(), oom_entry);
    if (at == st.anchors.end() || (*st.trace)[oom_entry].action != Action::kOom) {
      throw CannotReplay(
          fmt::format("entry {} of device {} is not a PyTorch OOM", oom_entry, device));
    }
    const size_t last = static_cast<size_t>(at - st.anchors.begin());
    Plan plan;
    derive_budget(st, recorded, s, plan, std::nullopt, device);
    const WhatIfResult rec = replay_recorded(st, recorded, plan, last, device);
    const WhatIfResult r = replay(st, *c, plan, last, plan.whatif_budget);
    OomWhatIf out;
    out.alloc_conf = alloc_conf;
    out.would_succeed = !r.first_failing_request;
    out.first_failing_request = r.first_failing_request;
    out.reserved = r.reserved;
    out.recorded_reserved = rec.reserved;
    return out;
  } catch (const CannotReplay& e) {
    if (why) *why = e.what();
    return std::nullopt;
  }
}

namespace {

std::string conf_label(const WhatIfResult& r) {
  std::string c = r.alloc_conf.empty() ? "defaults" : r.alloc_conf;
  if (r.recorded) return "recorded: " + c;
  return r.recorded_conf ? c + " (recorded, under --budget)" : c;
}

std::string budget_text(const std::optional<Budget>& b) {
  if (!b) return "none";
  return fmt::format("{}{}", snap::format_bytes(b->bytes),
                     b->fraction ? " for PyTorch (a per-process limit)" : "");
}

}  // namespace

void print_whatif_text(const std::vector<WhatIfDevice>& r, const snap::Snapshot& s,
                       const SiteTable& sites, const std::string& file, std::ostream& out) {
  const int64_t origin = time_origin(s);
  for (const auto& w : r) {
    out << fmt::format(
        "{}, device {}: PyTorch's caching allocator replayed (model of torch {}{})\n", file,
        w.device, torch_alloc::kModelledTorch,
        w.torch_version.empty() ? "" : "; the run used " + w.torch_version);
    out << fmt::format(
        "  {} requests{}, {} empty_cache() calls found; the recorded configuration "
        "reproduced all {} segment events\n",
        w.requests,
        w.window_end ? fmt::format(" up to the first OOM (entry {})", *w.window_end) : "",
        w.empty_cache_calls, w.recorded_segment_events);
    out << "  budget of the recorded run: "
        << (w.recorded_budget
                ? fmt::format("{} ({})", budget_text(w.recorded_budget), w.budget_source)
                : w.budget_source)
        << "\n";
    const bool other = w.budget.has_value() != w.recorded_budget.has_value() ||
                       (w.budget && (w.budget->bytes != w.recorded_budget->bytes ||
                                     w.budget->fraction != w.recorded_budget->fraction));
    if (other) out << "  budget of the other rows: " << budget_text(w.budget) << " (--budget)\n";
    out << '\n';
    std::vector<const WhatIfResult*> rows;
    for (const auto& x : w.results) rows.push_back(&x);
    const bool ranked = !rows.empty() && rows.front()->rank;
    if (ranked) {
      std::stable_sort(rows.begin(), rows.end(), [](const WhatIfResult* a, const WhatIfResult* b) {
        return a->rank < b->rank;
      });
    }
    const bool needs = std::any_of(rows.begin(), rows.end(),
                                   [](const WhatIfResult* x) { return x->needs_budget_bytes; });
    size_t width = 13;
    for (const auto* x : rows) width = std::max(width, conf_label(*x).size());
    out << fmt::format("  {}{:<{}}  {:>13}  {:>14}  {:>22}  {}{}\n", ranked ? "rank  " : "",
                       "configuration", width, "reserved peak", "allocated peak",
                       "fragmentation at peak", needs ? "needs at least  " : "", "out of memory");
    for (const auto* xp : rows) {
      const auto& x = *xp;
      std::string oom = "no";
      if (x.first_failing_request) {
        const auto& f = *x.first_failing_request;
        oom = fmt::format("at {}: {} at {}{}", format_time(f.time_us, origin),
                          snap::format_bytes(f.requested), sites.site(f.stack),
                          f.recorded_oom ? " (the recorded OOM)" : "");
      }
      out << fmt::format(
          "  {}{:<{}}  {:>13}  {:>14}  {:>22}  {}{}\n",
          ranked ? fmt::format("{:>4}  ", x.rank) : "", conf_label(x), width,
          snap::format_bytes(x.reserved.bytes), snap::format_bytes(x.allocated.bytes),
          fmt::format("{} ({:.1f}%)", snap::format_bytes(x.fragmentation_bytes),
                      100.0 * x.fragmentation_share),
          needs ? fmt::format("{:>14}  ",
                              x.needs_budget_bytes ? snap::format_bytes(*x.needs_budget_bytes) : "")
                : "",
          oom);
    }
    for (const auto* xp : rows) {
      if (!xp->own_address_segments || xp->recorded) continue;
      out << fmt::format(
          "  {}: {} segment{} made where the run made none take addresses of the model's own; "
          "best fit breaks ties between equal free blocks by address, so a real run may differ "
          "by a few segments\n",
          conf_label(*xp), xp->own_address_segments, xp->own_address_segments == 1 ? "" : "s");
    }
    out << '\n';
  }
}

void print_whatif_json(const std::vector<WhatIfDevice>& r, const SiteTable& sites,
                       std::ostream& out) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& w : r) {
    for (const auto& x : w.results) {
      nlohmann::ordered_json j;
      j["device"] = w.device;
      j["alloc_conf"] = x.alloc_conf;
      j["recorded"] = x.recorded;
      const auto& budget = x.recorded ? w.recorded_budget : w.budget;
      j["budget_bytes"] = budget ? nlohmann::ordered_json(budget->bytes) : nullptr;
      j["budget_fraction"] = budget ? nlohmann::ordered_json(budget->fraction) : nullptr;
      j["recorded_conf"] = x.recorded_conf;
      j["reserved_peak_bytes"] = x.reserved.bytes;
      j["reserved_peak_time_us"] = x.reserved.time_us;
      j["allocated_peak_bytes"] = x.allocated.bytes;
      j["requested_peak_bytes"] = x.requested.bytes;
      j["fragmentation_bytes"] = x.fragmentation_bytes;
      j["fragmentation_share"] = x.fragmentation_share;
      j["oom_fragmentation_bytes"] =
          x.first_failing_request ? nlohmann::ordered_json(x.oom_fragmentation_bytes) : nullptr;
      j["needs_budget_bytes"] =
          x.needs_budget_bytes ? nlohmann::ordered_json(*x.needs_budget_bytes) : nullptr;
      j["rank"] = x.rank ? nlohmann::ordered_json(x.rank) : nullptr;
      j["segment_events"] = x.segment_events;
      j["own_address_segments"] = x.own_address_segments;
      j["oom"] = x.first_failing_request.has_value();
      if (x.first_failing_request) {
        const auto& f = *x.first_failing_request;
        j["first_failing_request"] = {{"entry", f.entry},
                                      {"requested_bytes", f.requested},
                                      {"rounded_bytes", f.rounded},
                                      {"time_us", f.time_us},
                                      {"site", sites.site(f.stack)},
                                      {"recorded_oom", f.recorded_oom}};
      } else {
        j["first_failing_request"] = nullptr;
      }
      list.push_back(std::move(j));
    }
  }
  out << list.dump(2) << '\n';
}

}  // namespace cumemtrace::analysis
