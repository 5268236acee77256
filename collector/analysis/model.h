// Contract: the one engine every view of a snapshot uses (report, check, diff, the HTML report,
// Perfetto, folded stacks and `run`'s summary line). It answers, per device and at any moment:
//  - units: the allocations a user made, each with its site stack. cumemtrace files: every
//    segment (driver allocations one block each, VMM mappings, PyTorch segments merged in by the
//    collector): segment_alloc/segment_map add, segment_free/segment_unmap remove (a ranged unmap
//    removes what it covers). PyTorch's own files: tensors, alloc adds and free_completed removes.
//    The unit bytes are the headline "peak"/"live" of every view.
//  - layers (contract "merged snapshot" section 6): tracked = all segment_* entries of both
//    sources (cumemtrace files: the units themselves), pytorch reserved = segment_* of
//    PyTorch-sourced entries, pytorch allocated = PyTorch-sourced alloc (+) / free_completed (-),
//    driver-visible = the nearest NVML sample at or before the moment. A device without
//    PyTorch's caching allocator whose allocations come from stream-ordered pools (cudaMallocAsync,
//    PyTorch's backend:cudaMallocAsync; the collector's pool_memory samples) has the same two
//    layers from the pools: allocated = live async_pool allocations, reserved = the pools' latest
//    samples at or before the moment, never less than allocated (a sample taken before the pool
//    grew is behind). Tracked then counts the pools' reserved bytes instead of their allocations.
//  - the Breakdown of those layers at the peak, at each OOM and at snapshot time (then exact, from
//    the segments' blocks: allocated = active blocks, cached free = inactive blocks).
// A trace can start after the process did (PyTorch's ring keeps the last entries), so each series
// starts from what was live before the first entry: the end state minus what the trace made,
// plus what the trace frees without having allocated it. live_at_exit is what the snapshot says is
// held at its end (cumemtrace: allocation segments plus cuMemCreate handles still held, VMM
// mappings counted through their handles; PyTorch: active_allocated blocks, not the cache).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "analysis/watermark.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

class SiteTable;

// Byte arithmetic on sums of untrusted sizes: wraps instead of overflowing (undefined behaviour
// for signed integers). Real snapshots never get near 2^63 bytes; corrupt ones must not crash.
inline int64_t wrap_add(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
}
inline int64_t wrap_sub(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
}

enum class Flavor { kCumemtrace, kTorch };
Flavor flavor_of(const snap::Snapshot& s);
std::string_view flavor_name(Flavor f);

// True when the snapshot has PyTorch's caching-allocator view (its own file, or merged in).
bool has_pytorch(const snap::Snapshot& s);

struct Allocation {
  int device = 0;
  uint64_t addr = 0;
  uint64_t size = 0;
  int32_t stack = snap::kNoStack;
  bool before_trace = false;  // allocated before the trace window and its stack is unknown
  bool pytorch = false;       // a PyTorch segment or tensor, not a driver-level allocation
  int64_t time_us = 0;        // when allocated; 0 when before the trace
  bool async_pool = false;    // from a stream-ordered pool (cuMemAllocAsync, ...FromPoolAsync)
  snap::Category category = snap::Category::kNone;  // its allocating entry's (snapshot.h)
};

// A moment's memory in a PyTorch user's terms (DeviceReplay::attributed_after): in a cumemtrace
// file PyTorch's segments are replaced by the tensors live in them (PyTorch's alloc entries: what
// a user's line holds; a segment is blamed on nobody, whichever op triggered its cudaMalloc), and
// the rest of those segments is PyTorch's cache, its own line and never a site. Other libraries'
// driver allocations stay as they are. tensors + cached_free + other allocations = the moment's
// unit bytes. In PyTorch's own files the units are tensors already and cached_free is 0.
struct Attributed {
  std::vector<Allocation> allocations;  // PyTorch's tensors and other libraries' allocations
  uint64_t cached_free = 0;             // PyTorch's segment bytes no live tensor holds
  bool has_cache = false;               // PyTorch's segments were split (cached_free applies)
};
inline constexpr const char* kCachedFreeLabel = "cached, free in PyTorch's cache";

std::vector<Allocation> live_at_exit(const snap::Snapshot& s);

// Live allocations counted by kind: PyTorch's tensors (Allocation::pytorch: the caching
// allocator's active blocks) and the rest (driver allocations of the program and its libraries).
struct LiveCount {
  uint64_t count = 0;
  uint64_t bytes = 0;
  uint64_t pytorch = 0;
  uint64_t pytorch_bytes = 0;
};
LiveCount count_live(const std::vector<Allocation>& live);

// Times are shown relative to this: the traced program's start (cumemtrace), else the earliest
// trace entry.
int64_t time_origin(const snap::Snapshot& s);

// Number of devices the snapshot talks about (traces, segments, tool summary, annotations).
int device_count(const snap::Snapshot& s);

// Entries that are a request for memory by the program (what the size histogram and the "top
// allocation sites" count): `alloc` entries, and cumemtrace's VMM segment_map entries.
bool is_request(Flavor f, const snap::TraceEntry& e);

struct Timeline {
  int device = 0;
  uint64_t start_bytes = 0;  // live before the first trace entry
  // The units' highest point in the trace (index: the entry after which it holds; -1 = before
  // the first entry): what "live at the peak" lists.
  Watermark trace;
  // cumemtrace files: the collector's running count of this device over every event (the tool
  // section's DeviceSummary), also those a capped trace dropped and cuMemCreate'd memory that has
  // no trace entry; index -1 (no moment of the trace). nullopt where the file has no summary of
  // the device. Beside `trace`, never instead of it.
  std::optional<Watermark> collector_summary;
  uint64_t end_bytes = 0;
  uint64_t allocations = 0;  // entries that added memory
  uint64_t frees = 0;        // entries that removed memory
  // Entries that are requests (is_request): the size histogram's count. In a cumemtrace file
  // with PyTorch's blocks the units are segments and these are its tensors, a different number.
  uint64_t requests = 0;
  // PyTorch's caching allocator (its own files, or merged in): reserved = its segments (cache
  // included), allocated = its tensors.
  bool has_reserved = false;
  bool pool_layer = false;  // reserved/allocated are those of stream-ordered pools (see above)
  Watermark reserved;
  uint64_t reserved_end_bytes = 0;
  Watermark allocated;
  // Tracked (all segments): the moment the breakdown "at the peak" describes.
  Watermark tracked;
  // NVML samples of this device, when the collector had them; index -1.
  bool has_driver = false;
  Watermark driver;

  // True when the collector's summary knew more than the trace holds (a capped trace,
  // cuMemCreate'd memory without entries).
  bool summary_higher() const {
    return collector_summary && collector_summary->bytes > trace.bytes;
  }
  // The highest known unit watermark: the collector summary's where summary_higher(), else the
  // trace's. The one number of the views that show one peak (report's JSON, the page, the rank
  // table, metrics); each names the other where they differ (report's note).
  const Watermark& highest_known() const { return summary_higher() ? *collector_summary : trace; }
};

// Why the trace may not hold a device's highest point, or nullopt when it holds every entry of
// the run that the file covers: the oldest entries dropped by the collector's cap
// (--max-trace-events), or PyTorch's ring of max_entries overflowed (its trace_alloc_overflowed
// setting, written by torch versions after 2.11).
std::optional<std::string> trace_incomplete_why(const snap::Snapshot& s);

// True for a device the process used: memory, entries, PyTorch's layers or NVML samples on it, or
// allocations live there at exit. report.h lists these devices; diff.h pairs them by order.
inline bool device_used(const Timeline& tl, bool live_at_exit) {
  return tl.highest_known().bytes || live_at_exit || tl.allocations || tl.reserved.bytes ||
         tl.has_driver;
}

// The order in which a job's views pair one process's devices with another's (rank_table.h,
// diff.h): most memory first (the device's peak), then by ordinal. A rank's own device leads even
// where the rank touched another one too: on the H200 host, NCCL's start-up in rank 1 made a
// context (driver-visible memory, no allocation) on device 0 before rank 1 used its device 1.
inline std::vector<int> pairing_order(std::vector<std::pair<int, uint64_t>> device_peaks) {
  std::stable_sort(device_peaks.begin(), device_peaks.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<int> out;
  for (const auto& dp : device_peaks) out.push_back(dp.first);
  return out;
}

// A cumemtrace file with PyTorch's caching-allocator blocks: its units (allocations, frees) are
// segments, PyTorch's and other libraries', and its requests are PyTorch's tensors, so every
// view names the two apart (report's text, the HTML card).
inline bool tensors_apart(const Timeline& tl, Flavor f) {
  return tl.has_reserved && !tl.pool_layer && f == Flavor::kCumemtrace;
}

// The layers of a device's memory at one moment (contract section 6).
struct Breakdown {
  std::string moment;  // "peak", "oom" or "exit"
  // Moment "peak" of PyTorch's own file: the peak of its reserved bytes (the tracked peak there),
  // not the allocated peak that "live at the peak" lists; named so wherever it is shown
  // (breakdown_format.h: layers_peak_name).
  bool reserved_peak = false;
  int64_t time_us = 0;
  uint64_t tracked = 0;
  bool has_pytorch = false;
  std::string reserved_owner = "PyTorch";  // "PyTorch" or "pool" (stream-ordered pools)
  uint64_t pytorch_reserved = 0;
  uint64_t pytorch_allocated = 0;
  uint64_t cached_free = 0;                    // reserved - allocated
  std::optional<uint64_t> largest_free_block;  // snapshot time only (needs the blocks)
  double free_share = 0;                       // cached_free / reserved
  uint64_t other_libraries = 0;                // tracked - pytorch reserved
  std::vector<std::pair<std::string, uint64_t>> by_library;  // largest first
  std::optional<uint64_t> driver_visible;                    // nearest NVML sample at or before
  int64_t untracked = 0;  // driver_visible - tracked (when known)
  // Untracked split, when driver_visible is known and the device's contexts were measured at
  // creation (snapshot tool section's contexts): the contexts in being at this moment, and the
  // rest (modules loaded later, libraries' own memory): untracked = context + other_untracked.
  std::optional<uint64_t> context;
  int64_t other_untracked = 0;
  uint64_t oom_requested = 0;  // moment "oom": the request that failed
};

// One change to the live units, as a replay step reports it (a re-stack is a remove + add).
struct UnitChange {
  Allocation unit;
  bool added = false;
};

class DeviceReplay {
 public:
  DeviceReplay(const snap::Snapshot& s, int device);
  // How many replays this process has built (every thread): the tests' count of replays per
  // command (analysed_snapshot.h: one per device of a snapshot).
  static uint64_t built();

  const Timeline& timeline() const { return tl_; }
  const std::vector<snap::TraceEntry>& trace() const { return *trace_; }
  int device() const { return tl_.device; }
  Flavor flavor() const { return flavor_; }
  // Unit bytes after entry `index` (-1: before the first entry).
  uint64_t bytes_after(std::ptrdiff_t index) const;
  uint64_t tracked_after(std::ptrdiff_t index) const;
  uint64_t reserved_after(std::ptrdiff_t index) const;   // PyTorch reserved
  uint64_t allocated_after(std::ptrdiff_t index) const;  // PyTorch allocated
  // The NVML sample at or before `time_us` on this device.
  std::optional<uint64_t> driver_at(int64_t time_us) const;
  // The bytes of this device's CUDA contexts in being at `time_us`, as measured at their
  // creation; nullopt when no context was measured on the device.
  std::optional<uint64_t> context_at(int64_t time_us) const;
  const std::vector<snap::ContextMemory>& contexts() const { return contexts_; }
  // Allocations live after entry `index` (-1: before the first entry).
  std::vector<Allocation> live_after(std::ptrdiff_t index) const;
  // The same moment in a PyTorch user's terms (Attributed).
  Attributed attributed_after(std::ptrdiff_t index) const;
  // True when this device's units are split into tensors and cache (a cumemtrace file with
  // PyTorch's caching allocator's blocks).
  bool splits_tensors() const { return split_; }
  // Units live before the first entry.
  const std::vector<Allocation>& start_live() const { return start_live_; }
  // The last entry whose time is at or before `time_us`; -1 when none is.
  std::ptrdiff_t index_at_time(int64_t time_us) const;
  // Time of entry `index` (-1: of the first entry, 0 without entries).
  int64_t time_after(std::ptrdiff_t index) const;

  // The highest unit bytes within [t0, t1] (the state at t0 included), first such moment.
  Watermark peak_between(int64_t t0, int64_t t1) const;

  // The breakdown after entry `index`; `moment` names it.
  Breakdown breakdown_after(std::ptrdiff_t index, const SiteTable& sites, std::string moment) const;
  // At snapshot time: exact, from the segments and their blocks.
  Breakdown breakdown_at_exit(const SiteTable& sites) const;
  // Peak, each OOM (in order) and exit.
  std::vector<Breakdown> breakdowns(const SiteTable& sites) const;

  // Steps through the trace in order, reporting unit changes: what the HTML report's stacked
  // series, Perfetto's counters and the live tables are made of.
  class Cursor {
   public:
    explicit Cursor(const DeviceReplay& r);
    ~Cursor();
    Cursor(const Cursor&) = delete;
    Cursor& operator=(const Cursor&) = delete;
    // Applies the next entry; false at the end of the trace.
    bool step();
    std::ptrdiff_t index() const { return index_; }  // last entry applied, -1 before any
    const std::vector<UnitChange>& changes() const { return changes_; }
    std::vector<Allocation> live() const;
    Attributed attributed() const;
    // Changes to the live tensors of a device that splits_tensors() (PyTorch's alloc and
    // free_completed entries), from the last step.
    const std::vector<UnitChange>& tensor_changes() const { return tensor_changes_; }

   private:
    const DeviceReplay& r_;
    struct State;
    State* st_;
    std::ptrdiff_t index_ = -1;
    std::vector<UnitChange> changes_;
    std::vector<UnitChange> tensor_changes_;
  };

 private:
  void fill_layers();
  void fill_tensors();
  std::string reserved_owner() const;
  Breakdown breakdown_with(std::ptrdiff_t index, const std::vector<Allocation>& live,
                           const SiteTable& sites, std::string moment) const;

  const snap::Snapshot& s_;
  const std::vector<snap::TraceEntry>* trace_;
  Flavor flavor_;
  Timeline tl_;
  std::vector<Allocation> start_live_;
  bool split_ = false;                         // see splits_tensors()
  std::vector<Allocation> tensor_start_live_;  // tensors live before the first entry (split_)
  std::vector<int64_t> rel_;      // unit bytes after each entry relative to start_bytes
  std::vector<int64_t> res_rel_;  // PyTorch reserved, relative to reserved_start_
  std::vector<int64_t> alc_rel_;  // PyTorch allocated, relative to allocated_start_
  uint64_t reserved_start_ = 0, allocated_start_ = 0;
  std::vector<snap::DriverMemorySample> driver_;  // this device's samples by time
  std::vector<snap::ContextMemory> contexts_;     // this device's measured contexts
  void fill_pool_layers();
  // Stream-ordered pools: this device's samples by time; the sum of each pool's latest sample at
  // or before a time; the async allocations live at the end of the trace, by address.
  std::vector<snap::PoolMemorySample> pools_;
  uint64_t pool_reserved_at(int64_t time_us) const;
  std::unordered_set<uint64_t> pool_live_end_;
  // Stacks of the allocations live at exit, by address: fills in stacks the trace entries lack
  // (cumemtrace writes frames on `alloc` entries only, not on segment_alloc).
  std::unordered_map<uint64_t, std::pair<uint64_t, int32_t>> end_stacks_;
  bool sorted_ = true;
};

}  // namespace cumemtrace::analysis
