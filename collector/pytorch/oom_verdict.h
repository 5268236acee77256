// Contract: the verdict at each OOM of a snapshot (issue 43, item 1): why the request failed, in
// the numbers PyTorch's own OOM message prints (c10/cuda/CUDACachingAllocator.cpp: "Tried to
// allocate X. GPU d has a total capacity of T of which F is free. ... Of the allocated memory A is
// allocated by PyTorch, and R - A is reserved by PyTorch but unallocated."), and what would help.
//
// Which OOMs: every `oom` trace entry, PyTorch's (its allocator raised OutOfMemoryError: size =
// the request as the allocator rounded it, device_free = cudaMemGetInfo's free bytes) and
// cumemtrace's own (a driver allocation failed: size = the request, device_free the driver's free
// bytes), except a driver OOM that PyTorch's allocator met on its way to its own OOM (a later
// PyTorch `oom` on the device with no PyTorch `alloc` in between): that one is the same failure.
//
// The facts, at the OOM's entry (an `oom` entry changes nothing, so the state after it is the
// state the request met), from the model's breakdown (model.h): PyTorch reserved and allocated
// (block bytes, as PyTorch's OOM message counts them, where the replay labelled the blocks:
// whatif.h label_block_sizes; in an OOM snapshot, the segments' own active blocks), or a
// stream-ordered pool's (reserved_owner "pool"), cached free = reserved - allocated,
// non-PyTorch bytes by library, the CUDA context when measured. Free blocks of PyTorch's segments:
// exact from the snapshot's own segments when nothing on the device changed after the OOM (an OOM
// snapshot); otherwise reconstructed by replaying the device's trace to the OOM: the extents of
// PyTorch's segments (segment_alloc/free, and segment_map/unmap runs of expandable segments)
// minus the live tensor blocks (alloc to free_completed, their blocks where labelled, else the
// request rounded by the run's rules).
// A free byte is releasable (empty_cache() returns it) when its segment holds no live block.
//
// Budget: what the process could have had: the bytes it held on the device (driver-visible when an
// NVML sample is known, else tracked) plus the device's free bytes. When PyTorch's allocator raised
// an OOM although the device had the segment free (its size by torch_allocator_rules.h under the
// run's configuration), a budget below the device was in force (a memory fraction,
// set_per_process_memory_fraction): where the capture recorded the fraction (whatif.h
// memory_fraction_at) the budget is what it allowed and the headroom what was left under it
// ("2.00 GiB allowed by the memory fraction 0.25 of 8.00 GiB"); else the budget is what PyTorch
// had reserved and the device's free bytes do not count as headroom.
//
// Verdict: "exhaustion" when the free bytes, even compacted (cached free + headroom), are fewer
// than the request; else "fragmentation" (enough is free, but no free block or segment holds it).
// Advice only where the facts support it: expandable segments for PyTorch fragmentation when they
// are off (the tool section's pytorch.expandable_segments; never when on); for exhaustion, how
// many bytes would have to be freed; that empty_cache() cannot help when every free byte of the
// cache sits in a segment holding live blocks.
//
// Who holds the memory: the ledger's moment after the OOM's entry (ledger.h moment_at): PyTorch's
// tensors live then by category and by (user line, category) (frames.h: SiteTable::site), by line
// alone (category "unknown") when the run has no categories (categories.h: labels_categories);
// the cache, other libraries and the context are the facts above. A device without PyTorch
// tensors: its live allocations by site (grouping.h), category "library". For exhaustion the advice
// then names the largest holders (line, category, bytes) and the shortfall they would have to
// shrink by, and, when the shortfall is exact and more than everything live, that no shrinking
// would have made room.
//
// The replay (item 3, whatif.h oom_whatif): for a fragmentation verdict of PyTorch's allocator
// with expandable segments off (the tool section's, else PyTorch's own allocator_settings), the
// trace is replayed to the OOM under "expandable_segments:True": the verdict says whether the
// request would have succeeded and the reserved peak under it against the recorded one. When the
// replay refuses (it cannot reproduce the recording), nothing is said of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/analysed_snapshot.h"
#include "analysis/model.h"
#include "pytorch/ledger.h"
#include "pytorch/whatif.h"

namespace cumemtrace::analysis {

struct OomVerdict {
  int device = 0;
  size_t index = 0;  // the oom entry in device_traces[device]
  int64_t time_us = 0;
  bool pytorch = false;  // PyTorch's allocator raised it; else a driver allocation failed
  uint64_t requested = 0;
  uint64_t device_free = 0;  // the driver's free bytes at the OOM
  bool has_cache = false;    // a caching allocator (PyTorch's, or a stream-ordered pool)
  std::string cache_owner;   // "PyTorch" or "pool"
  uint64_t reserved = 0;     // the cache's reserved bytes
  uint64_t allocated = 0;    // ... and those of live tensors (pool: live allocations)
  uint64_t cached_free = 0;  // reserved - allocated
  std::optional<uint64_t> largest_free;  // largest free block of PyTorch's segments
  bool blocks_exact = false;  // free blocks from the snapshot's segments, not reconstructed
  uint64_t releasable = 0;    // free bytes in segments without live blocks
  uint64_t unreleasable = 0;  // free bytes in segments that hold live blocks
  uint64_t budget = 0;
  bool budget_below_device = false;  // PyTorch failed with the request free on the device
  // The memory fraction in force (recorded by the capture): the budget as the user set it.
  std::optional<snap::MemoryFractionChange> fraction;
  uint64_t headroom = 0;         // what the budget had left beyond what was held
  uint64_t compacted_free = 0;   // cached_free + headroom
  uint64_t other_libraries = 0;  // tracked bytes outside the cache
  std::vector<std::pair<std::string, uint64_t>> by_library;  // largest first
  std::optional<uint64_t> context;                           // CUDA contexts, as measured
  std::optional<bool> expandable_segments;                   // as the capture found them
  int32_t stack = snap::kNoStack;                            // the failing request's
  bool categorized = false;  // the run's tensors carry categories: held.by_category is meaningful
  bool phased = false;       // the run has automatic phases: held.phase and held.step are
  LedgerMoment held;         // who holds the memory at the OOM (ledger.h)
  std::optional<OomWhatIf> whatif;  // fragmentation with expandable segments off, when replayable
  std::string verdict;              // "exhaustion" or "fragmentation"
  uint64_t shortfall = 0;           // exhaustion: request - compacted free
  std::vector<std::string> advice;
};

// Every OOM of the snapshot, by device, then in trace order.
std::vector<OomVerdict> oom_verdicts(const AnalysedSnapshot& a, const SiteTable& sites);

// One line for `run`'s stderr and the report's heading: "exhaustion: 26.0 MiB requested, 25.0 MiB
// free even compacted (cached free 25.0 MiB + 0 B headroom), largest free block 21.0 MiB".
std::string oom_verdict_line(const OomVerdict& v);

// The facts after the verdict line, one line each, as the report's first section and the HTML's
// OOM card print them: "PyTorch's caching allocator could not get 200 MiB; the device had 0 B
// free", the budget, the cache's layers and free blocks, other libraries, the CUDA context.
std::vector<std::string> oom_facts(const OomVerdict& v);

// " (step 2, forward)" when the run has automatic phases: the moment "held by" describes; else "".
std::string oom_held_when(const OomVerdict& v);

// One OOM as `report --format json`'s `ooms[]` item and the HTML's OOM card read it (without the
// stack's frames, which the caller adds as it shows stacks): the verdict, its line and facts,
// every number, held_by_category (null without categories) / held_by_site (`top` lines) /
// held_at (null without automatic phases), advice, the failing request's site and stack id, and
// `whatif` only when the replay answered.
nlohmann::json oom_verdict_json(const OomVerdict& v, const SiteTable& sites, size_t top);

}  // namespace cumemtrace::analysis
