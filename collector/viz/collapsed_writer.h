// Contract: writes folded stacks ("root;caller;callee BYTES" per line), the input of
// flamegraph.pl and speedscope, weighted by the bytes live at each device's peak (the analysis
// engine's replay, analysis/model.h) or at exit (model.h's live_at_exit: what report, check and
// the HTML report call live at exit). Lines are outermost frame
// first, rooted at "cuda:N", with PyTorch viewer's hidden frames dropped; frames are "name
// (file:line)" with ';' replaced so a frame never splits. Identical stacks are summed; lines are
// sorted for stable output. A block without a stack is "cuda:N;<no stack>" (or
// "cuda:N;<before the trace>" when it predates the trace).
#pragma once

#include <ostream>
#include <string>

#include "snapshot/snapshot.h"

namespace cumemtrace::viz {

enum class CollapsedMoment { kPeak, kExit };

void write_collapsed(const snap::Snapshot& s, CollapsedMoment when, std::ostream& out);
std::string to_collapsed(const snap::Snapshot& s, CollapsedMoment when);

}  // namespace cumemtrace::viz
