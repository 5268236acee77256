// Contract: `cumemtrace whatif` — the recorded stream of PyTorch's allocator requests replayed
// through the model of its caching allocator (torch_allocator_model.h) under the configuration the
// run used and under others, per device. The stream is the PyTorch-sourced entries of a cumemtrace
// snapshot or every entry of PyTorch's own: `alloc` (the requested size; the model rounds it),
// `free_completed` (the block back in its pool; `free_requested` alone changes nothing, as a
// record_stream'd block stays unusable until its completion), `oom` (its size is already rounded)
// and the segment events, which are the model's answer, not its input, except where they show a
// call of empty_cache(): releases not made by a request's retry.
// The replay under the recorded configuration must give the recorded segment events exactly
// (action and size, between the same requests; addresses aside). Where it does not, or where the
// trace cannot be a complete stream (events dropped, a free of a tensor the trace never allocated,
// a torch the model does not cover, no PyTorch events), replay_whatif throws CannotReplay saying
// why, and no prediction is made.
// Every configuration is evaluated over the same window: the whole trace, or up to and including
// its first recorded OOM (what a program did after an OOM it survived depends on the OOM). A
// configuration under which a request fails stops there: the program would have raised.
// The budget: the recorded run replays under the budget the recording shows: the memory fraction
// the capture recorded ("2.00 GiB allowed by the memory fraction 0.25 of 8.00 GiB"), else what
// its first OOM shows (PyTorch's reserved bytes then + the device's free bytes, or, where the
// device had room, the largest limit of set_per_process_memory_fraction that fails that request),
// else none (nothing runs out). The other configurations replay under --budget SIZE (a device of
// that many bytes for PyTorch, below the recorded peak included: the recorded configuration then
// gets a row of its own under it), else under the recorded budget.
// --sweep adds kSweep's settings and ranks every row (rank 1: no OOM, the smallest reserved peak,
// the least fragmentation); --needs bisects each row's smallest budget without an OOM.
// Fragmentation is PyTorch's inactive_split_bytes (the model's inactive_split()).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "analysis/frames.h"
#include "analysis/watermark.h"
#include "pytorch/torch_allocator_model.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

class CannotReplay : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct FailingRequest {
  size_t entry = 0;        // index into the device's trace
  uint64_t requested = 0;  // bytes asked for
  uint64_t rounded = 0;    // as the allocator rounds it under this configuration
  int64_t time_us = 0;
  int32_t stack = snap::kNoStack;
  bool recorded_oom = false;  // the recorded run failed here too
};

struct WhatIfResult {
  std::string alloc_conf;  // the configuration ("" = PyTorch's defaults)
  bool recorded = false;   // the configuration the run used
  // The model's watermarks over the replay (analysis/watermark.h; index -1: the model's moments,
  // not the trace's entries).
  Watermark reserved;
  Watermark allocated;  // block sizes, as memory_allocated()
  Watermark requested;  // bytes asked for: the same under every configuration
  // PyTorch's inactive_split_bytes at the reserved peak: free bytes in segments that hold
  // other blocks (a wholly free segment is cache, not fragmentation).
  uint64_t fragmentation_bytes = 0;
  double fragmentation_share = 0;        // of the reserved peak
  uint64_t oom_fragmentation_bytes = 0;  // the same at the first failing request
  uint64_t segment_events = 0;           // segment_alloc/free/map/unmap the model made
  // Segments made where the recording made none of that kind and size: their addresses are the
  // model's own (the driver's choice of an address is not modelled), and best fit breaks ties
  // between equal free blocks by address, so the row may differ from a real run by a few
  // segments (measured: garbage_collection_threshold, +0.63% of the reserved peak; docs/whatif.md).
  uint64_t own_address_segments = 0;
  std::optional<FailingRequest> first_failing_request;
  bool recorded_conf = false;  // the recorded configuration replayed under --budget
  // --needs: the smallest budget (of the budget's kind) under which nothing fails in the window.
  std::optional<uint64_t> needs_budget_bytes;
  size_t rank = 0;  // --sweep: 1 = best (no OOM, then reserved peak, then fragmentation)
};

struct WhatIfDevice {
  int device = 0;
  std::string torch_version;                           // as recorded ("" in PyTorch's own files)
  std::optional<torch_alloc::Budget> budget;           // the other configurations' (--budget)
  std::optional<torch_alloc::Budget> recorded_budget;  // the recorded run's
  std::string budget_source;             // how the recorded budget was found, for people
  size_t requests = 0;                   // alloc + oom entries in the window
  uint64_t recorded_segment_events = 0;  // reproduced exactly under the recorded configuration
  size_t empty_cache_calls = 0;          // found in the recording
  std::optional<size_t> window_end;      // the first recorded OOM's entry, when there is one
  std::vector<WhatIfResult> results;     // the recorded configuration first, then each asked
};

struct WhatIfOptions {
  std::vector<std::string> alloc_confs;  // PyTorch's syntax, each checked by parse_alloc_conf
  std::optional<uint64_t> budget_bytes;  // --budget
  bool sweep = false;                    // --sweep: also kSweep, ranked
  bool needs = false;                    // --needs: the smallest budget of each row
};

// The usual settings `whatif --sweep` tries beside the recorded one.
inline const std::vector<std::string> kSweep = {
    "",
    "expandable_segments:True",
    "max_split_size_mb:128",
    "max_split_size_mb:512",
    "roundup_power2_divisions:4",
    "garbage_collection_threshold:0.8,max_split_size_mb:512",
};

// The configuration the snapshot says the run used: PyTorch's own `allocator_settings`
// (PYTORCH_CUDA_ALLOC_CONF and the parsed values), or cumemtrace's tool section (pytorch
// alloc_confs: the configuration the program started with; expandable_segments in snapshots
// without it). Throws CannotReplay where it cannot be parsed.
torch_alloc::AllocatorConfig recorded_config(const snap::Snapshot& s);

// The per-process memory fraction in force on `device` at `time_us` (the last one set at or before
// it), as the capture recorded it (the tool section's pytorch.memory_fractions); nullopt when none.
std::optional<snap::MemoryFractionChange> memory_fraction_at(const snap::Snapshot& s, int device,
                                                             int64_t time_us);
// "2.00 GiB allowed by the memory fraction 0.25 of 8.00 GiB": the budget as the user set it.
std::string fraction_text(const snap::MemoryFractionChange& m);

// Every device with PyTorch allocator events. Throws CannotReplay (see above) or
// std::invalid_argument for an alloc_conf the model refuses (its message says why).
std::vector<WhatIfDevice> replay_whatif(const snap::Snapshot& s, const WhatIfOptions& o);

// For an OOM verdict: would the request of the oom entry `oom_entry` (an index into
// device_traces[device]) have succeeded under `alloc_conf`, replaying up to and including it?
struct OomWhatIf {
  std::string alloc_conf;
  bool would_succeed = false;
  Watermark reserved;           // under alloc_conf, up to that request
  Watermark recorded_reserved;  // the recorded configuration's, the same window
  std::optional<FailingRequest> first_failing_request;  // an earlier request may fail instead
};
// nullopt with `why` when the trace cannot be replayed or alloc_conf is refused.
std::optional<OomWhatIf> oom_whatif(const snap::Snapshot& s, int device, size_t oom_entry,
                                    const std::string& alloc_conf, std::string* why);

// Labels every request and return of PyTorch's allocator (alloc, free_requested, free_completed)
// with its block size (snap::TraceEntry::block_size), on each device where the replay under the
// recorded configuration reproduces the recorded segments: the one place where the views' bytes
// (allocated, free, fragmentation, the ledger, OOM facts, check, diff, html, metrics) become
// PyTorch's own. A device it cannot replay keeps requested sizes; `why` (when given) gets one
// line for it. Returns the number of devices labelled.
size_t label_block_sizes(snap::Snapshot& s, std::vector<std::string>* why = nullptr);

// The writer's half (live/process_session.cpp, after label_block_sizes): the blocks of PyTorch's
// segments in a cumemtrace snapshot, which the live capture tiles by PyTorch's rules from the
// requested sizes alone (live/torch_allocator.h), are given the sizes the replay found (a block
// that kept an unsplit remainder, for one), and the free blocks are the gaps between them, so
// that the file's segments and every count made from its trace agree. Nothing changes where the
// replay labelled nothing or a segment's blocks overlap (bad input).
void tile_blocks_as_replayed(snap::Snapshot& s);

void print_whatif_text(const std::vector<WhatIfDevice>& r, const snap::Snapshot& s,
                       const SiteTable& sites, const std::string& file, std::ostream& out);
void print_whatif_json(const std::vector<WhatIfDevice>& r, const SiteTable& sites,
                       std::ostream& out);

}  // namespace cumemtrace::analysis
