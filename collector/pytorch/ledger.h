// Contract: the ledger of a PyTorch run with automatic phases (phases.h), what a PyTorch user asks
// first, per device with PyTorch tensors, from the one engine (model.h's DeviceReplay: allocated
// and reserved after each entry, the Breakdown of the layers) and the one category rule
// (categories.h) and site rule (frames.h: SiteTable::site):
//  - per phase span of the first step and of the steady state (the last complete step; absent
//    when it is the first): allocated and reserved before and after (DeviceReplay's values after
//    the last entry before the span and after its last entry, so each delta is exactly the
//    difference of allocated_after() at the span's boundaries), the span's own allocated peak,
//    and what it added (allocs + / free_completed -, the bytes allocated_after counts) by category
//    and by (site, category), and, when the snapshot names modules, by module at the depth asked
//    (modules.h: TensorModules::module_of, module_at_depth; a tensor counts in the module of its
//    own phase, so the gradients zero_grad frees are their parameters' modules'). A gradient's
//    line, here and at the peaks, is its parameter's name ("grad of h.0.mlp.fc.weight") where the
//    tool section names it; growth keeps the site rule's line, as check --max-growth does. Setup,
//    data and loss spans are listed only when they hold trace entries.
//  - at the allocated peak and at the reserved peak (each its own moment): the tensors' bytes by
//    category and by (site, category) (a tensor is live after its alloc until its free_completed;
//    what the trace cannot place, allocated before it, is "unknown" at kBeforeTraceSite), and the
//    Breakdown at that index: PyTorch's cache (reserved - allocated), other libraries by name,
//    CUDA context.
//  - growth per step without marks: with K complete steps (K >= 3), a warm-up of W = 2 steps
//    (W = 1 when K = 3); the tensors allocated in steps W+1 .. K-1 (1-based) still live after the
//    last entry of step K (so each survived at least one whole later step), by (site, category),
//    divided by the K-1-W steps counted. Fewer complete steps: not judged, `why` says so. Within
//    a window (check --range), the same over the complete steps that end inside it.
//  - leaked (check --max-leaked-bytes on such a run): at the end of the trace, tensors allocated
//    after the warm-up (in a step past W) that are not parameters, gradients or optimizer state,
//    plus driver-level allocations of other libraries made after the warm-up and still held.
//    PyTorch's cache is never a leak (it is not a tensor).
//  - held outside PyTorch's blocks at the end of the last complete training step (categories.h
//    held_outside_blocks): the walked gradients no live block holds, in a CUDA graph pool (torch.
//    compile mode="reduce-overhead": its replays' outputs, which memory_allocated() does not
//    count) or, where they cannot be placed, listed with why. They are in no list above (those
//    add up to memory_allocated()); the view by module counts them (modules.h).
// Steps are numbered from 1 where shown (text and JSON), from 0 in phases.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/analysed_snapshot.h"
#include "analysis/frames.h"
#include "analysis/model.h"
#include "pytorch/categories.h"
#include "pytorch/phases.h"

namespace cumemtrace::analysis {

// A category's bytes in PyTorch's blocks (what memory_allocated() counts: the lists add up to
// the allocated deltas and moments) and in its tensors' own bytes (categories.h tensor_bytes:
// what named_parameters() and MemTracker count); they differ by the blocks' unsplit remainders.
struct CategoryBytes {
  snap::Category category = snap::Category::kUnknown;
  int64_t bytes = 0;
  int64_t tensor_bytes = 0;
};

struct SiteBytes {
  std::string site;
  snap::Category category = snap::Category::kUnknown;
  int64_t bytes = 0;
  uint64_t count = 0;  // tensors allocated (phases, growth) or live (peaks)
  int32_t stack = snap::kNoStack;
};

// What a module (its name's first --module-depth components: modules.h) added in a phase, in
// its tensors' own bytes (the view by module's rule: modules.h).
struct ModuleBytes {
  std::string module;
  int64_t bytes = 0;
};

struct LedgerPhase {
  Phase phase = Phase::kOther;
  int step = 0;  // 0-based (phases.h)
  int micro = -1;
  int micro_steps = 0;  // forwards in its step
  int64_t begin_us = 0, end_us = 0;
  std::ptrdiff_t before_index = -1, last_index = -1;  // the span's entries: (before, last]
  uint64_t allocated_before = 0, allocated_after = 0;
  uint64_t reserved_before = 0, reserved_after = 0;
  Watermark allocated_peak;                      // within the span, its state before it included
  std::vector<CategoryBytes> added_by_category;  // non-zero only, largest change first
  std::vector<SiteBytes> added_by_site;          // non-zero only, largest change first
  std::vector<ModuleBytes> added_by_module;      // the same by module (modules.h), if named
};

struct LedgerMoment {
  std::string moment;  // "allocated peak" or "reserved peak"
  std::ptrdiff_t index = -1;
  int64_t time_us = 0;
  Phase phase = Phase::kOther;
  int step = 0;
  uint64_t allocated = 0, reserved = 0;
  std::vector<CategoryBytes> by_category;
  std::vector<SiteBytes> by_site;
  Breakdown layers;  // cache, other libraries, context
};

struct Growth {
  bool judged = false;
  std::string why;                          // when not judged
  int warmup = 0;                           // steps skipped
  int first_counted = 0, last_counted = 0;  // 0-based steps whose tensors count
  int end_step = 0;                         // live after this step's last entry
  int steps_counted = 0;
  uint64_t bytes = 0;              // live, allocated in the counted steps
  uint64_t per_step = 0;           // bytes / steps_counted
  std::vector<SiteBytes> by_site;  // bytes per step each, largest first
};

struct DeviceLedger {
  int device = 0;
  int first_step = 0;
  std::vector<LedgerPhase> first;
  std::optional<int> steady_step;  // the last complete step, when it is not the first
  std::vector<LedgerPhase> steady;
  LedgerMoment allocated_peak, reserved_peak;
  Growth growth;
  int warmup = 0;                  // the warm-up the leak rule used
  std::vector<Allocation> leaked;  // the leak rule's allocations (contract)
  uint64_t leaked_bytes = 0;
  HeldAtStep held;  // at the end of the last complete step (contract); step -1: none
};

struct Ledger {
  bool training = false;
  int module_depth = 0;  // the lists by module's depth; 0: the snapshot names no modules
  size_t steps = 0, complete_steps = 0;
  std::vector<DeviceLedger> devices;
};

// nullopt unless the snapshot is a PyTorch run with automatic phases. `module_depth`: the depth
// of the phases' lists by module (modules.h: module_at_depth).
std::optional<Ledger> build_ledger(const AnalysedSnapshot& a, const SiteTable& sites,
                                   int module_depth = 2);

// Growth per step (contract) over the complete steps that end within [t0, t1] (check --range:
// a test's window); the whole run by default.
struct DeviceTensors;  // categories.h
Growth growth_per_step(const Phases& ph, const DeviceReplay& rp, const DeviceTensors& dt,
                       const SiteTable& sites, int64_t t0 = std::numeric_limits<int64_t>::min(),
                       int64_t t1 = std::numeric_limits<int64_t>::max());

// One moment (contract: "at the allocated peak and at the reserved peak"), after entry `index` of
// the device's trace: the tensors live then by category and by (site, category), the Breakdown at
// that index. The OOM verdict (oom_verdict.h) asks it who holds the memory at an OOM.
class TensorModules;  // modules.h
// `names`, when given, names gradients by their parameter (contract).
LedgerMoment moment_at(std::string name, std::ptrdiff_t index, const Phases& ph,
                       const DeviceReplay& rp, const DeviceTensors& dt, const SiteTable& sites,
                       const TensorModules* names = nullptr);

// The warm-up (steps skipped) of growth and leaks for K complete steps (contract).
int warmup_steps(size_t complete_steps);

// "parameter", "optimizer state": category_name with spaces, for people.
std::string category_label(snap::Category c);
// "forward", "forward 2" (its micro-step, from 1, when the step has several), "optimizer"...
std::string phase_label(const LedgerPhase& p);

// The ledger's lists, as every view that shows them writes them: "activation 3.00 MiB, parameter
// 6.00 MiB (tensors 5.00 MiB)" (the tensors' own bytes where they differ from the blocks';
// "nothing" when empty; signed deltas with `sign`), one indented line per (site, category) up to
// `top` (the rest counted), and their JSON ({"activation": bytes} in blocks, the same of the
// tensors' own bytes, [{site, category, bytes, count}]).
std::string categories_text(const std::vector<CategoryBytes>& v, bool sign);
// `categories` false: the run has none, the lines go without "(unknown)".
void print_site_bytes(std::ostream& out, const std::vector<SiteBytes>& v, size_t top, bool sign,
                      bool categories = true);
nlohmann::json categories_json(const std::vector<CategoryBytes>& v);
nlohmann::json category_tensors_json(const std::vector<CategoryBytes>& v);
nlohmann::json sites_json(const std::vector<SiteBytes>& v, size_t top);

// Lines (site, category) under `min_line_bytes` (either sign) are left out of the lists (the
// per-category sums keep them): a 4-byte scalar is no line a user acts on. 0 lists them all.
inline constexpr uint64_t kMinLedgerLineBytes = 1024;
void print_ledger_text(const Ledger& l, int64_t origin_us, size_t top, std::ostream& out,
                       uint64_t min_line_bytes = kMinLedgerLineBytes);
nlohmann::json ledger_json(const Ledger& l, size_t top,
                           uint64_t min_line_bytes = kMinLedgerLineBytes);

}  // namespace cumemtrace::analysis
