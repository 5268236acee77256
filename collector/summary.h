// Contract: the paragraph `cumemtrace run` prints on stderr for each snapshot it wrote: how the
// process ended, peak per device, bytes still live at exit, events and drops, anomalies.
#pragma once

#include <string>

#include "snapshot.h"

namespace cumemtrace::collect {

std::string summarize(const snap::Snapshot& s);

}  // namespace cumemtrace::collect
