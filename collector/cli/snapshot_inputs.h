// Contract: the snapshots an offline command over many processes (report, check) reads, from the
// paths given on its command line: a file is read as it is (snapshot_input.h); a directory
// stands for the processes whose snapshots it holds: every `*.json` and `*.pickle` directly
// inside (not `*.perfetto.json`, convert's output, nor bounded capture's `*.intervals.json`), in
// name order, of which only the snapshots written when a process ended are kept (verdicts/limits.h
// mid_run_snapshot: one written at an OOM, on request or periodically is the same process again,
// earlier; PyTorch's own files have no reason and are kept). A file that cannot be read stays in
// the list, in its place, with its one-line error, so that every command can show the others and
// still fail (exit 2).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "verdicts/check.h"

namespace cumemtrace::cli {

struct SnapshotInputs {
  std::vector<analysis::LoadedSnapshot> files;  // in order; unreadable ones carry their error
  size_t skipped = 0;                           // directories' snapshots written while running
  bool many = false;                            // several paths, or a directory
};

// `each`, when given, is called with every readable file kept, as soon as it is read (and before
// the next one is): `report DIR` builds each file's report there and keeps its tool section alone.
// One file for a view of its own (diff's two sides, html's diff page): read as above, PyTorch's
// block bytes labelled, so that every command shows the same bytes. Throws snap::ReadError.
snap::Snapshot read_snapshot_for_views(const std::string& path);

SnapshotInputs read_snapshot_inputs(
    const std::vector<std::string>& paths,
    const std::function<void(analysis::LoadedSnapshot&)>& each = {});

}  // namespace cumemtrace::cli
