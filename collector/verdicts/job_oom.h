// Contract: a job's first OOM (issue 58, item 1): over the snapshots of a job's processes (each
// process's final snapshot: it keeps every `oom` entry of the run, also when the launcher killed
// the process after it), the OOM that happened first in wall-clock time (the trace's times are
// microseconds since the epoch, comparable across processes and hosts as far as their clocks
// agree), with its verdict (oom_verdict.h), the failing request's line, and what every other
// process held at that moment on each device it used: the tracked bytes live then (model.h
// DeviceReplay::bytes_after, the report's peak measure) and PyTorch's allocated and reserved where
// the device has them. A snapshot does not say when its process ended beyond its last event, so
// what a process held last counts until the OOM; one that started after the OOM says so. Ties
// (the same microsecond) go to the lower rank, then the file name. The full snapshots it needs
// (the OOM's process for its line, every other one for what it held) are read one at a time. `run`
// prints it after the job's line; `report DIR` before its rank table (rank_table.h holds it for
// every view).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "pytorch/oom_verdict.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

// Reads a process's full snapshot again, for a view over many processes that kept only each one's
// tool section in memory (`report DIR`: a job of 1,024 ranks is 20 GB of snapshots). Throws
// snap::ReadError when the file cannot be read any more.
using SnapshotLoader = std::function<snap::Snapshot()>;

// `s` itself when `load` is empty, else the snapshot `load` reads (owned by the pointer).
std::shared_ptr<const snap::Snapshot> full_snapshot(const snap::Snapshot* s,
                                                    const SnapshotLoader& load);

struct JobOomInput {
  std::string file;
  const snap::Snapshot* snapshot = nullptr;       // full, or with `load` its tool section alone
  const std::vector<OomVerdict>* ooms = nullptr;  // oom_verdicts(snapshot); null: none
  SnapshotLoader load = {};                       // empty: `snapshot` is the full one
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
  OomVerdict oom;
  std::string site;            // the failing request's line (frames.h site)
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
