// Contract: `cumemtrace report` over many snapshots (a job's ranks, or any processes): one row per
// process and device it used, every number taken from the process's summary (process_summary.h),
// which holds the single-file report's (report.h's DeviceReport, so the two always show the same
// bytes):
//  - peak = Timeline::highest_known() (the report's headline peak); allocated / reserved peak =
//    PyTorch's layers (Timeline, where the device has them); driver-visible peak (NVML, where
//    sampled); CUDA context = the most the device's measured contexts held at once; other
//    libraries = the peak layers' other_libraries (where PyTorch is present: else every byte is
//    the program's own); per category = the ledger's tensors at the allocated peak (ledger.h,
//    a PyTorch run with automatic phases).
//  - each row also says, without a median or a flag, the OOMs on its device (report.h's ooms) and
//    the bytes live at exit there (the report's live_at_exit_bytes: what the process's final
//    snapshot holds at its end; for a process killed without a chance to free, what it held when
//    it was killed); the table holds the job's first OOM (job_oom.h) when any process had one.
//  - rows are named by rank_identity.h (rank, else pid) and sorted by job (rank_identity.h's job
//    id), then rank, then pid. Processes of several jobs in one folder (two jobs' id, or one rank
//    claimed by two pids) are said: `jobs` lists the job ids, `repeated_ranks` the ranks seen more
//    than once within one job id; with several jobs each name ends in its job ("[job ID]"). A
//    process's devices are numbered most memory first (its "slot", model.h's pairing_order): rank
//    0's cuda:0 and rank 1's cuda:1 are both slot 0, also where rank 1 touched cuda:0 too (NCCL's
//    start-up context), and only rows of one slot are compared (diff.h pairs the same way).
//  - per slot and column the median is the lower median of the rows that have the column (an
//    actual row's value); the median row of a slot is the one whose peak is that median (the
//    first in rank order on a tie). A row is flagged on a column when it differs from the median
//    by more than BOTH thresholds (strictly more than a share of the median and strictly more
//    than a number of bytes; defaults 10% and 64 MiB: exactly 64 MiB apart is not flagged), so
//    small jobs' noise is never flagged.
//  - for a flagged row (not itself the median row): the lines that make the difference (its
//    live-at-the-peak bytes by site, frames.h's rule, minus the median row's; largest change
//    first) and where it first diverges from the median row: at the end of the first automatic
//    step (phases.h, auto:step) where the measured bytes differ by more than both thresholds,
//    the same way as the flagged value does (above the median, or below it),
//    when both processes have complete steps; else the first moment (time since each process's
//    own start) where they do. The measured bytes are those of the first flagged column among
//    peak (units), allocated and reserved (model.h's series); peak for the other columns.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/rank_identity.h"
#include "verdicts/job_oom.h"
#include "verdicts/process_summary.h"
#include "verdicts/report.h"

namespace cumemtrace::analysis {

struct RankThresholds {
  double share = 0.10;           // more than this share of the median
  uint64_t bytes = 64ull << 20;  // and more than this many bytes
};

// One process: its summary (process_summary.h: every number of its rows, its identity, its OOMs),
// and how to read its full snapshot, which the table does only for the rows it shows in detail (a
// flagged row and its median row: where it diverges, the lines) and, for the job's first OOM,
// what every other process held then (job_oom.h), so that many processes need not all be in
// memory nor all be read. The same table whether the summaries were read from their files or
// built from the snapshots in memory.
struct RankInput {
  std::string file;
  const ProcessSummary* summary = nullptr;
  SnapshotLoader load;
  // Its report (site names as the caller's options give them) when the caller holds it; else the
  // table builds it from `load` where it needs the lines live at the peak.
  const Report* report = nullptr;
};

struct RankOptions {
  bool full_names = false;  // the lines' names (frames.h), for reports the table builds itself
};

struct SiteChange {
  std::string site;
  int64_t bytes = 0, median_bytes = 0;  // live at each row's peak
  int32_t stack = snap::kNoStack;
};

struct Divergence {
  std::optional<int> step;  // 1-based automatic step, when found at a step's end
  int64_t time_us = 0;      // the moment in the row's own snapshot
  int64_t since_start_us = 0;
  uint64_t bytes = 0, median_bytes = 0;
  std::string measure;  // "peak", "allocated peak" or "reserved peak": the column's series
};

struct RankRow {
  size_t process = 0;  // index into RankTable::processes
  int device = 0;
  size_t slot = 0;
  std::vector<std::optional<uint64_t>> values;  // by RankTable::columns
  std::vector<size_t> flagged;                  // column indices
  std::optional<size_t> median_row;             // the slot's median row (flagged rows only)
  std::optional<Divergence> divergence;         // flagged rows only, when found
  std::vector<SiteChange> lines;                // flagged rows only, non-zero changes
  size_t ooms = 0;                              // OOMs on this device (report.h ooms)
  uint64_t live_at_exit = 0;                    // bytes live at the process's end on it
};

struct RankProcess {
  std::string file;
  RankIdentity id;
  int pid = 0;
  std::string exe;
  std::string name;  // "rank 1/2 (local 1) on node7", or "pid 1234 (app)"
};

struct RankTable {
  RankThresholds thresholds;
  std::vector<std::string> columns;  // "peak", "allocated peak", ..., then categories
  std::vector<RankProcess> processes;
  std::vector<RankRow> rows;  // by process (rank order), then slot
  // Per slot: the median of each column (nullopt where fewer than two rows have it).
  std::vector<std::vector<std::optional<uint64_t>>> medians;
  std::optional<JobOom> first_oom;  // the job's first OOM (job_oom.h; inputs are processes)
  std::vector<std::string> jobs;    // distinct job ids, in row order; empty when none is known
  std::vector<int> repeated_ranks;  // ranks that more than one process of one job id claims
};

RankTable build_rank_table(const std::vector<RankInput>& inputs, const RankThresholds& t,
                           const RankOptions& o = {});

void print_rank_table_text(const RankTable& t, size_t top, std::ostream& out);
nlohmann::json rank_table_json(const RankTable& t, size_t top);

}  // namespace cumemtrace::analysis
