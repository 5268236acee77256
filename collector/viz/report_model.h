// Contract: everything the HTML report draws, aggregated in C++ so the page stays small and fast
// whatever the trace length, from the analysis engine (analysis/model.h: one replay, one site
// rule, the same numbers report/check/summary print). Per device:
// - a timeline of live bytes stacked by category when the file has categories (TraceEntry::
//   category; PyTorch's tensors by theirs, other libraries' driver allocations as "library" and,
//   where PyTorch's segments are split into tensors and cache (model.h Attributed), PyTorch's
//   cache as its own series: the series add up to the live bytes), else by the `top_sites`
//   allocation sites with the most byte-time (area under their curve) plus "other", PyTorch's
//   memory by its tensors' sites and its cache one series of its own ("cache", last) where its
//   segments are split (model.h Attributed: never a segment stacked at its trigger's line) and
//   in PyTorch's own files (what is reserved beyond the tensors);
//   downsampled into at most `max_buckets` buckets (half cut by entries, half by time: a busy
//   stretch keeps its resolution whatever idle time surrounds it) with up to two points each: the
//   moment of the bucket's highest total (so every local peak, and the device's peak exactly,
//   survives) and the bucket's last state (so a drop is not hidden behind a long idle gap). The
//   other layers ride along per point: PyTorch reserved, PyTorch allocated (cumemtrace files with
//   PyTorch merged in; in PyTorch's own files the stacked tensors are the allocated line) and
//   driver-visible (NVML) bytes.
// - the peak (the engine's: Timeline::highest_known()), OOMs, and the user's marks:
//   START/END annotations paired by name as bands, MARK annotations as lines (at most `max_bands`
//   of each: the longest bands, evenly spaced marks, the first OOMs). The automatic phases
//   (auto:forward / auto:backward / auto:optimizer START/END) are apart, so they never crowd out
//   the user's marks: `phases`, as they were up to `max_buckets` of them; past that each time
//   bucket shows the phases that ran in it side by side, each as wide as its share of the bucket
//   (at most 3 x max_buckets, so a 10,000-step run stays drawable), and the `auto:step`
//   MARKs as step boundaries (at most `max_bands`, evenly thinned, each with its step number).
// - the layers breakdown (analysis::Breakdown) at the peak, at each OOM and at exit.
// - what was live at the peak and at exit (model.h's live_at_exit), grouped by site (largest first,
//   `max_groups`), each with its largest `max_stacks` stacks; PyTorch's memory by its tensors,
//   its cache one row of its own (model.h Attributed).
// - a histogram of allocation sizes in power-of-two buckets (count and bytes).
// - the OOM card: the verdict at every OOM (pytorch/oom_verdict.h, the one `report` prints
//   first): facts, who holds the memory, advice, the failing request's site and stack.
// - by module (pytorch/modules.h, the table `report` prints), at depths 1 to 3, for a PyTorch run
//   whose snapshot carries module names; empty otherwise (the page helper draws it).
// The x axis is µs since the Unix epoch, or the event index when the trace has no time span.
// Stacks referenced by groups are listed in `stacks` (visible frames only), so the page can show
// them and search them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/analysed_snapshot.h"
#include "analysis/model.h"
#include "pytorch/modules.h"
#include "pytorch/oom_verdict.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::viz {

struct ReportOptions {
  size_t max_buckets = 2000;
  size_t top_sites = 10;
  size_t max_groups = 50;
  size_t max_stacks = 5;
  size_t max_bands = 2000;
};

struct TimelinePoint {
  int64_t x = 0;
  uint64_t total = 0;
  uint64_t reserved = 0;         // PyTorch reserved
  uint64_t allocated = 0;        // PyTorch allocated (cumemtrace files only)
  uint64_t driver = 0;           // driver-visible; 0 without samples
  std::vector<uint64_t> series;  // one per ReportDevice::series
  // Trace entries replayed up to this point (0 before the first): the page's event-index axis,
  // memory_viz's, reads it.
  uint64_t entry = 0;
};

struct StackShare {
  int32_t stack = snap::kNoStack;
  uint64_t bytes = 0;
  uint64_t count = 0;
};

struct SiteGroup {
  std::string site;
  uint64_t bytes = 0;
  uint64_t count = 0;
  std::vector<StackShare> stacks;
};

struct LiveTable {
  uint64_t bytes = 0;
  uint64_t count = 0;
  // What the count counts, in `report`'s words: at exit analysis::live_count_text; at the peak
  // driver allocations (segments included) where PyTorch's tensors are apart, else allocations.
  std::string count_text;
  std::vector<SiteGroup> groups;
  uint64_t rest_bytes = 0;  // in groups past max_groups
  uint64_t rest_groups = 0;
  // PyTorch's cache, where its segments are split (model.h Attributed): in no group and not in
  // `bytes` (at exit `bytes` is what the program holds, `report`'s "live at exit"); at the peak
  // bytes + cached_free = the peak.
  std::optional<uint64_t> cached_free;
};

struct Band {
  std::string name;
  int64_t start = 0;
  int64_t end = 0;
};

struct Mark {
  std::string name;
  int64_t x = 0;
};

// An automatic phase: "forward", "backward" or "optimizer" (from auto:NAME).
struct Phase {
  std::string name;
  int64_t start = 0;
  int64_t end = 0;
};

// An automatic step boundary (auto:step MARK): the end of step `step` (1-based).
struct StepMark {
  int64_t x = 0;
  uint64_t step = 0;
};

struct Oom {
  int64_t x = 0;
  uint64_t requested = 0;
  uint64_t device_free = 0;
};

struct SizeBucket {
  int log2 = 0;  // sizes in [2^log2, 2^(log2+1)); 0 also holds size 0
  uint64_t count = 0;
  uint64_t bytes = 0;
};

struct ReportDevice {
  int device = 0;
  bool time_axis = true;
  int64_t x_begin = 0;
  int64_t x_end = 0;
  // Times are labelled relative to this, the origin `report` and the summary line use
  // (analysis::time_origin): a moment reads the same in every view.
  int64_t time_origin = 0;
  size_t entries = 0;
  uint64_t allocations = 0;
  uint64_t frees = 0;
  uint64_t requests = 0;
  bool tensors_apart = false;  // analysis::tensors_apart: the card names segments and tensors //
                               // analysis::Timeline::requests: the size histogram's count
  // Site labels, the last "other" when there are more sites; or, when `by_category`, the
  // categories' names (snap::category_name, "library", and "cache" for PyTorch's cache).
  std::vector<std::string> series;
  bool by_category = false;
  bool cache_series = false;  // the last series is PyTorch's cache ("cache"), by category or site
  std::vector<TimelinePoint> points;
  uint64_t peak_bytes = 0;
  int64_t peak_x = 0;
  uint64_t peak_reserved = 0;
  bool allocated_line = false;  // points carry `allocated`
  bool pool_layer = false;      // reserved/allocated are stream-ordered pools' (model.h)
  bool driver_line = false;     // points carry `driver`
  uint64_t peak_allocated = 0;
  uint64_t peak_driver = 0;
  std::vector<analysis::Breakdown> layers;
  std::vector<Oom> ooms;  // the first max_bands
  uint64_t oom_count = 0;
  std::vector<Band> bands;
  std::vector<Mark> marks;
  size_t bands_dropped = 0;   // bands and marks not drawn past max_bands
  std::vector<Phase> phases;  // automatic phases (see above)
  size_t phase_count = 0;     // before the time buckets merged them
  std::vector<StepMark> steps;
  uint64_t step_count = 0;
  LiveTable at_peak;
  LiveTable at_exit;
  std::vector<SizeBucket> sizes;
};

struct ReportStack {
  int32_t id = 0;
  std::vector<snap::Frame> frames;  // visible frames, innermost first
};

struct ReportModel {
  std::vector<ReportDevice> devices;
  std::vector<ReportStack> stacks;
  std::vector<analysis::OomVerdict> ooms;     // every OOM, by device then in trace order
  std::vector<analysis::ModuleView> modules;  // depths 1..3; empty without module names
};

ReportModel build_report_model(const analysis::AnalysedSnapshot& view,
                               const ReportOptions& opt = {});

}  // namespace cumemtrace::viz
