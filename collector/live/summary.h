// Contract: the paragraph `cumemtrace run` prints on stderr for each snapshot it wrote: how the
// process ended, peak per device, bytes still live at exit, the memory layers at exit (PyTorch
// reserved = allocated + cached free; driver-visible = untracked (CUDA context measured at
// creation + other untracked) + other libraries + reserved),
// events and drops, anomalies; the process's rank when it was one of a job
// (analysis/rank_identity.h). summarize_job is the one line after them when `run` traced more than
// one process: how many, and the bytes live at exit in total and on the process that held most.
// The numbers are the analysis engine's (analysis/model.h).
#pragma once

#include <string>
#include <vector>

#include "analysis/analysed_snapshot.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

// `view`: the snapshot's analysed view, shared with the collector's other readers of it (its
// process summary) so that each device is replayed once.
std::string summarize(const analysis::AnalysedSnapshot& view);
std::string summarize_job(const std::vector<const snap::Snapshot*>& processes);

}  // namespace cumemtrace::collect
