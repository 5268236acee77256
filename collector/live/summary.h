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

#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

std::string summarize(const snap::Snapshot& s);
std::string summarize_job(const std::vector<const snap::Snapshot*>& processes);

}  // namespace cumemtrace::collect
