// Contract: a job's first OOM (issue 58, item 1): over the snapshots of a job's processes (each
// process's final snapshot: it keeps every `oom` entry of the run, also when the launcher killed
// the process after it), the OOM that happened first in wall-clock time (the trace's times are
// microseconds since the epoch, comparable across processes and hosts as far as their clocks
// agree), with its verdict (oom_verdict.h), the failing request's line, and what every other
// process held at that moment on each device it used: the tracked bytes live then (model.h
// DeviceReplay::bytes_after, the report's peak measure) and PyTorch's allocated and reserved where
// the device has them. The OOM itself comes from the processes' summaries (process_summary.h:
// each one's first OOM, its verdict line and the request's line); what the others held then from
// their full snapshots, read one at a time. A snapshot does not say when its process ended beyond
// its last event, so what a process held last counts until the OOM; one that started after the OOM
// says so. Ties (the same microsecond) go to the lower rank, then the file name. `run` prints it
// after the job's line; `report DIR` before its rank table (rank_table.h holds it for every view).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "analysis/analysed_snapshot.h"
#include "pytorch/oom_verdict.h"
#include "snapshot/snapshot.h"
#include "verdicts/process_summary.h"

namespace cumemtrace::analysis {

// Reads a process's full snapshot and gives its analysed view (analysis/analysed_snapshot.h, owning
// the snapshot), for a view over many processes that holds only each one's summary
// (process_summary.h; `report DIR`: a job of 1,024 ranks is 20 GB of snapshots). A loader of a
// file reads it at each call, and the caller keeps the view only while it uses it: holding every
// rank's snapshot would not fit. Throws snap::ReadError when the file cannot be read any more.
using SnapshotLoader = std::function<std::shared_ptr<const AnalysedSnapshot>()>;

// A loader of a snapshot held in memory (no copy; `s` must outlive it): every call gives the same
// view, so the job's OOM, the rank table and the job page replay its devices once.
SnapshotLoader in_memory(const snap::Snapshot& s);
// A loader that reads its file with `read` at each call (a view of its own each time).
SnapshotLoader from_file(std::function<snap::Snapshot()> read);

struct JobOomInput {
  std::string file;
  const ProcessSummary* summary = nullptr;  // its OOMs, identity and start
  SnapshotLoader load;                      // its full snapshot (what it held at another's OOM)
};

struct HeldAtOom {
  size_t input = 0;  // index into the inputs
  std::string file;
  std::string name;  // rank_identity.h process_name
  int device = 0;
  bool started = true;                          // false: the process started after the OOM's moment
  uint64_t bytes = 0;                           // tracked bytes live then
  std::optional<uint64_t> allocated, reserved;  // PyTorch's, where the device has them
};

struct JobOom {
  size_t input = 0;  // the process whose OOM came first
  std::string file;
  std::string name;  // its rank_identity.h process_name
  int pid = 0;
  FirstOom oom;                // the OOM, its verdict line and the request's line
  int64_t since_start_us = 0;  // since the earliest start among the processes
  size_t ooms = 0;             // OOMs in the whole job
  size_t processes_with_oom = 0;
  std::vector<HeldAtOom> others;  // every other process in rank order, each device it used
};

// Nullopt when no process had an OOM.
std::optional<JobOom> first_job_oom(const std::vector<JobOomInput>& in);

// The lines `run` and `report DIR` print, without a prefix: "first OOM of the job: rank 2/4 ...
// (pid 7) on cuda:0 at +0.052000 s: exhaustion: ...", "  the request: at main (x.py:3)", one
// "  the other processes then: ..." line per other process and device; beyond `top` of those, the
// `top` that held most, largest first, and what the rest held in total.
std::vector<std::string> job_oom_lines(const JobOom& j, size_t top);

nlohmann::json job_oom_json(const JobOom& j);

}  // namespace cumemtrace::analysis
