// Contract: writes a Snapshot as Chrome trace-event JSON ({"traceEvents": [...]}) that
// ui.perfetto.dev and chrome://tracing open. Each device is one process ("cuda:N", pid N+1, as
// pid 0 is dropped by some importers) with counter tracks (ph "C", exact, not downsampled) from
// the analysis engine (analysis/model.h): "live" (the unit bytes every view calls live/peak, its
// first sample the state before the trace), "reserved" and "allocated" (PyTorch's layers, when the
// snapshot has them), "driver-visible" (one sample per NVML sample); an instant event (ph "i") per
// allocation request on thread 1, named after its site (analysis/frames.h), with size and address
// in args and its stack as "sf" into the top-level "stackFrames" table (stacks are written once,
// so a million events stay a few hundred bytes each); OOMs as global instants; marks as complete
// slices (ph "X") on thread 2: START/END pairs matched by name (innermost first), an END without
// START dropped, a START without END running to the last event; MARK as an instant. ts is in µs
// since the Unix epoch, as the snapshot has it. Perfetto ignores "sf", so each allocation's args
// also carry its innermost `stack_frames` visible frames as text ("stack", one frame a line; 0
// leaves it out, SIZE_MAX keeps every frame): the size of the file grows with it.
// A rank of a job (analysis/rank_identity.h) is one track group of its own in every rank's file:
// the process is named "rank R @ HOST" (plus " cuda:N" where it used several devices), its pid is
// (R + 1) * 1000 + N + 1 (the same on every host, so merged files never share a pid) and its
// process_sort_index orders the groups by rank. Times are the snapshot's own, µs since the Unix
// epoch on the wall clock the collector converts every event to, so per-rank files merged by
// Perfetto (trace_processor util merge; JSON files share one clock domain at zero offset) line
// up; otherData carries rank and host.
#pragma once

#include <ostream>
#include <string>

#include "snapshot/snapshot.h"

namespace cumemtrace::viz {

struct PerfettoOptions {
  size_t stack_frames = 8;
};

void write_perfetto(const snap::Snapshot& s, std::ostream& out, const PerfettoOptions& opt = {});
std::string to_perfetto(const snap::Snapshot& s, const PerfettoOptions& opt = {});

}  // namespace cumemtrace::viz
