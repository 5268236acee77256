// Contract: small hand-built snapshots with known answers, shared by the viz tests and by
// write_samples (which writes them for the Python checks). Times are µs since the epoch.
#pragma once

#include "snapshot/snapshot.h"

namespace cumemtrace::viz::testing {

inline constexpr int64_t kT0 = 1795312050000000;

// Device 0: a 1 MiB "train_step" block allocated and freed, a 4 MiB "leaky_cache_grow" block
// never freed, a 2 MiB "scratch" block freed after the peak. Peak = 7 MiB after the third alloc;
// live at exit = the leak. One START/END mark around the step, one MARK, one OOM.
snap::Snapshot leak_snapshot();

// `allocs` allocation/free pairs cycling over `sites` stacks, on two devices, with big
// addresses, a shared stack, unicode names and a tool section: exercises batching and memo.
snap::Snapshot busy_snapshot(size_t allocs, size_t sites);

}  // namespace cumemtrace::viz::testing
