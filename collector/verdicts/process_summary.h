// Contract: a process's summary (issue 58, item 2): the few KB of a final snapshot that the views
// over many processes (`report DIR`, `check DIR`, `html DIR`) need for every process, so that a
// job of 1,024 ranks is not 20 GB to parse for a table. Built by one function from a snapshot and
// its report (summarize_process), written beside the final snapshot by the collector at the
// process's end and by `cumemtrace summarize FILE` for older files (EXE.rank0.PID.json ->
// EXE.rank0.PID.summary, JSON), and read back by the same code; schemas/summary.schema.json is the
// file's contract. It holds:
//  - the snapshot it summarises (file name, size, modification time in ns): a summary whose
//    snapshot's name, size or mtime differ is stale, and readers read the snapshot instead;
//  - the process: its tool section's identity fields (pid, exe, host, the launcher's variables
//    rank_identity.h reads, start time, how it ended, events, anomalies) and the identity derived
//    from them (for readers other than cumemtrace; cumemtrace derives it again);
//  - per device, the rank table's values (rank_table.h, from report.h's DeviceReport): peak,
//    PyTorch's allocated and reserved peaks, driver-visible peak, CUDA context, other libraries,
//    the ledger's categories at the allocated peak, live at exit (bytes, count), OOMs; and the
//    ledger's growth per step (ledger.h Growth) where it has one;
//  - per device, what `check`'s limits measure at the end (DeviceLimits);
//  - the OOMs: their count and the first (by time, then trace order: job_oom.h's rule), with its
//    index in oom_verdicts, verdict line, request and line.
// Every number is the report's own, so a view reads the same bytes from a summary as from the
// snapshot (a test compares the outputs byte for byte).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/analysed_snapshot.h"
#include "analysis/rank_identity.h"
#include "snapshot/snapshot.h"
#include "verdicts/report.h"

namespace cumemtrace::analysis {

inline constexpr int kSummaryVersion = 1;

// The snapshot file a summary was made from, as the file system sees it.
struct SummarizedFile {
  std::string name;  // base name
  uint64_t bytes = 0;
  int64_t mtime_ns = 0;
  bool operator==(const SummarizedFile&) const = default;
};

// What `check` measures on a device at the process's end (process_summary.cpp measure_limits: the
// same functions its limits use, without --range, --mark or suppressions), so that `check DIR`
// judges a passing process from its summary with the same words.
struct LayerPeakMeasure {
  uint64_t bytes = 0;
  int64_t time_us = 0;
  bool operator==(const LayerPeakMeasure&) const = default;
};
struct DeviceLimits {
  std::optional<LayerPeakMeasure> allocated, reserved, driver;  // absent: no such layer there
  uint64_t leaked_bytes = 0, leaked_count = 0;                  // --max-leaked-bytes' measure
  std::optional<int> leaked_warmup;  // the ledger's leak rule was used (its warm-up)
};

struct DeviceSummary {
  int device = 0;
  uint64_t peak_bytes = 0;  // Timeline::highest_known()
  int64_t peak_time_us = 0;
  std::optional<uint64_t> allocated_peak_bytes, reserved_peak_bytes;  // PyTorch's layers
  std::optional<uint64_t> driver_peak_bytes;                          // NVML
  std::optional<uint64_t> context_bytes;    // the most its measured contexts held at once
  std::optional<uint64_t> other_libraries;  // at the peak, where PyTorch is present
  // The ledger's tensors at the allocated peak by category (category_name, bytes); empty
  // without a ledger for this device.
  std::vector<std::pair<std::string, uint64_t>> categories;
  bool has_ledger = false;
  uint64_t live_at_exit_bytes = 0, live_at_exit_count = 0;
  size_t ooms = 0;
  std::optional<Growth> growth;  // the ledger's growth per step (by_site: the largest only)
  DeviceLimits limits;
};

struct FirstOom {
  size_t index = 0;  // in oom_verdicts' order (report.h ooms)
  int device = 0;
  int64_t time_us = 0;
  uint64_t requested = 0;
  std::string verdict;  // OomVerdict::verdict
  std::string line;     // oom_verdict_line
  std::string site;     // the failing request's line (frames.h site)
};

struct ProcessSummary {
  SummarizedFile file;
  // The tool section's identity fields only (pid, exe, hostname, rank, start_time_us, reason,
  // ended, events_total, events_dropped, ring_error); absent for PyTorch's own files.
  std::optional<snap::ToolSection> tool;
  int64_t time_origin_us = 0;  // model.h time_origin
  size_t anomalies = 0;
  bool used_cuda = true;                        // !snap::never_used_cuda
  std::optional<size_t> steps, complete_steps;  // the ledger's, when the run has one
  std::vector<DeviceSummary> devices;           // report.h's devices, in its order
  int device_count = 0;                         // model.h device_count (check's devices)
  size_t oom_count = 0;
  std::optional<FirstOom> first_oom;
};

// `r`: build_report(a, ...)'s, from the same analysed view (its replays measure the limits too);
// `file`: the snapshot's file as stat gives it (summarized_file). The first OOM's line is named
// with folded names (frames.h), as job_oom.h shows it.
ProcessSummary summarize_process(const AnalysedSnapshot& a, const Report& r, SummarizedFile file);

// The same from the snapshot alone (its report with report's defaults), `path` the file it was
// written to or read from ("" when none: the summary names no file and is never current).
ProcessSummary summarize_snapshot(const AnalysedSnapshot& a, const std::string& path);

// The process's identity (rank_identity.h).
RankIdentity summary_identity(const ProcessSummary& p);
// "rank 1/2 (local 1) on node7" for a rank, else "pid 1234 (app)": how every view over many
// processes names one.
std::string process_name(const ProcessSummary& p);

// The file's name, size and mtime; nullopt when it cannot be stat'ed (or is no regular file).
std::optional<SummarizedFile> summarized_file(const std::string& path);

nlohmann::json summary_json(const ProcessSummary& p);
// Throws std::runtime_error (one line) on a document that is not a summary of this version.
ProcessSummary summary_from_json(const nlohmann::json& j);

// "DIR/x.rank0.7.json" -> "DIR/x.rank0.7.summary"; "" for a name without ".json" (a pickle).
// Not "*.json": every tool that takes a folder's *.json for snapshots (cumemtrace before
// summaries, scripts, PyTorch's viewer) passes it by.
std::string summary_path_for(const std::string& snapshot_path);

// Writes `p` as `snapshot_path`'s summary: a new file renamed into place (never half-written, a
// symlink there replaced, not followed; never the snapshot itself). Throws std::runtime_error.
void write_summary_file(const ProcessSummary& p, const std::string& snapshot_path);

// The summary beside `snapshot_path` when there is one and it is current (its snapshot's name,
// size and mtime are the file's now); nullopt otherwise (none, stale, unreadable: the caller
// reads the snapshot).
std::optional<ProcessSummary> read_current_summary(const std::string& snapshot_path);

}  // namespace cumemtrace::analysis
