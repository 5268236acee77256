// Contract: the paragraph `cumemtrace run` prints on stderr for each snapshot it wrote: how the
// process ended, peak per device, bytes still live at exit, the memory layers at exit (PyTorch
// reserved = allocated + cached free; driver-visible = untracked (CUDA context measured at
// creation + other untracked) + other libraries + reserved),
// events and drops, anomalies. The numbers are the analysis engine's (analysis/model.h).
#pragma once

#include <string>

#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

std::string summarize(const snap::Snapshot& s);

}  // namespace cumemtrace::collect
