// Contract: `cumemtrace report` — what a snapshot says about memory, for people (text) and
// machines (json): first the verdict at each OOM (oom_verdict.h: facts, who holds the memory,
// advice, the failing request's stack; json `ooms`), then, for a PyTorch run with automatic
// phases, the ledger (ledger.h: per phase added by category and line, the peaks by category,
// growth per step); then
// per device peak, the memory layers (PyTorch reserved = allocated + cached free; driver-visible =
// untracked (CUDA contexts as measured at creation + other untracked) + other libraries + PyTorch
// reserved) and the device's measured contexts, at the peak, each OOM and at exit, an optional
// --range window (peak and leaks within it), (bytes, time, what was live at the peak by allocation
// site: PyTorch's memory by its tensors, its cache its own line), bytes live at exit by call
// stack, top allocation sites by bytes and by count, the allocation size histogram, events and
// drops, anomalies, and VMM/pinned-host memory still held. "At exit" is said only of a snapshot
// written when the program ended; one written at an OOM, on request or periodically says "at this
// snapshot" (the tool section's reason). Building and printing are separate so tests and `diff`
// can use the numbers directly.
#pragma once

#include <cstddef>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/analysed_snapshot.h"
#include "analysis/frames.h"
#include "analysis/grouping.h"
#include "analysis/model.h"
#include "analysis/range.h"
#include "pytorch/ledger.h"
#include "pytorch/modules.h"
#include "pytorch/oom_verdict.h"

namespace cumemtrace::analysis {

struct DeviceReport {
  Timeline timeline;
  // Live at the peak, by site: PyTorch's tensors and other libraries' allocations; PyTorch's cache
  // apart (model.h Attributed), set where its segments were split into tensors and cache.
  std::vector<SiteStat> at_peak;
  std::optional<uint64_t> at_peak_cached;
  std::optional<uint64_t> at_exit_cached;  // the same at exit (the exit layers' cached free)
  std::vector<StackGroup> live_at_exit;    // by stack
  uint64_t live_at_exit_bytes = 0;
  uint64_t live_at_exit_count = 0;
  LiveCount live_at_exit_kinds;               // the same, PyTorch's tensors apart
  std::vector<Breakdown> layers;              // at the peak, at each OOM, at exit (model.h)
  std::vector<snap::ContextMemory> contexts;  // CUDA contexts measured at creation
  std::optional<RangeResult> range;           // with --range
};

struct Report {
  std::string file;
  Flavor flavor = Flavor::kCumemtrace;
  uint64_t trace_entries = 0;
  int64_t time_origin_us = 0;         // times are shown relative to this
  std::vector<DeviceReport> devices;  // only devices with memory or trace entries
  std::vector<SiteStat> top_by_bytes;
  std::vector<SiteStat> top_by_count;
  std::vector<SizeBucket> histogram;
  std::optional<RangeWindow> range;
  std::optional<Ledger> ledger;       // a PyTorch run with automatic phases (ledger.h); shown first
  std::vector<OomVerdict> ooms;       // every OOM, by device and in trace order
  std::optional<ModuleView> modules;  // a PyTorch run with module names (modules.h): by module
};

struct RangeNotFound : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `range`: the name of a START..END annotation pair (range.h) to evaluate too; RangeNotFound
// when the snapshot has no completed pair of that name.
// `module_depth`: the by-module view's depth (modules.h). Every device's replay, the ledger's, the
// by-module view's and the OOM verdicts' are the view's (analysed_snapshot.h: one per device).
Report build_report(const AnalysedSnapshot& view, const SiteTable& sites, const std::string& file,
                    const std::string& range = {}, int module_depth = 2);

struct ReportOptions {
  size_t top = 10;           // rows per table
  size_t frames = 6;         // program frames shown per stack
  bool full_names = false;   // C++ names as recorded instead of folded (frames.h)
  std::string range;         // annotation pair to evaluate (range.h); empty = none
  bool small_lines = false;  // the ledger lists lines under 1 KiB too (ledger.h)
  int module_depth = 2;      // the by-module view's depth (modules.h)
};

void print_report_text(const Report& r, const snap::Snapshot& s, const SiteTable& sites,
                       const ReportOptions& o, std::ostream& out);
void print_report_json(const Report& r, const snap::Snapshot& s, const SiteTable& sites,
                       const ReportOptions& o, std::ostream& out);
// The document print_report_json writes (report over many files nests it, --each).
nlohmann::json report_json(const Report& r, const snap::Snapshot& s, const SiteTable& sites,
                           const ReportOptions& o);

}  // namespace cumemtrace::analysis
