// Contract: what `cumemtrace check` judges (LoadedSnapshot: a file, read or not) and its outcome,
// independent of how it is printed. One Finding per limit and device evaluated (passed or failed)
// and one per warning; text, json, github and JUnit printers all render this same list, so the
// formats never disagree on what failed.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

struct LoadedSnapshot {
  LoadedSnapshot() = default;
  LoadedSnapshot(std::string p, snap::Snapshot s, std::string why = {})
      : path(std::move(p)), snapshot(std::move(s)), unreadable(std::move(why)) {}
  std::string path;
  snap::Snapshot snapshot;
  // Why the file could not be read (one line naming it); empty when it was. An unreadable file is
  // a failed verdict of its own ("readable"), shown beside the others' and never stopping them,
  // and makes run_check return 2 (unreadable input).
  std::string unreadable;
};

struct StackNote {                 // one stack shown under a finding
  std::string title;               // "2.00 MiB in 3 allocations"
  std::vector<std::string> lines;  // "at function (file:line)"
  std::string file;                // the site's source file, for annotations; may be empty
  int64_t line = 0;
};

enum class Severity { kPass, kError, kWarning };

struct Finding {
  std::string snapshot;  // the file checked
  std::string check;     // "complete", "leaked-bytes", "peak-bytes", "growth", "anomaly"
  int device = -1;       // -1: not per device
  Severity severity = Severity::kPass;
  std::string message;  // one line, without the file name
  uint64_t value = 0;
  uint64_t limit = 0;
  std::vector<StackNote> stacks;
  uint64_t stacks_omitted = 0;
  // False for a limit that could not be judged (nothing in the snapshot to measure it by): an
  // error all the same, so that a gate never passes for want of data, but no limit was exceeded.
  bool judged = true;
};

struct SuppressionUse {
  std::string source;  // "FILE:LINE"
  std::string pattern;
  uint64_t hits = 0;
  uint64_t bytes = 0;
};

struct CheckResult {
  std::vector<std::string> snapshots;
  // Per snapshot (same order): "rank 1/2 (local 1) on node7" for a rank of a job
  // (rank_identity.h), else empty; and whether it could be read at all.
  std::vector<std::string> ranks;
  std::vector<bool> readable;
  // "file (rank 1/2 (local 1) on node7)", or the file alone: how every format names a snapshot.
  std::string label(size_t i) const {
    return i < ranks.size() && !ranks[i].empty() ? snapshots[i] + " (" + ranks[i] + ")"
                                                 : snapshots[i];
  }
  bool all_readable() const {
    for (bool r : readable)
      if (!r) return false;
    return true;
  }
  std::vector<Finding> findings;
  std::vector<SuppressionUse> suppressions_used;
  int failures() const {
    int n = 0;
    for (const auto& f : findings) n += f.severity == Severity::kError;
    return n;
  }
  int passes() const {
    int n = 0;
    for (const auto& f : findings) n += f.severity == Severity::kPass;
    return n;
  }
};

}  // namespace cumemtrace::analysis
