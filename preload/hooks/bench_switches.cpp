// Switches for in-process A/B benchmarks, only in libcumemtrace_bench.so (built with
// CUMEMTRACE_BENCH_SWITCHES; never shipped): whole runs of the same program differ by more than
// the cost being measured, so a benchmark alternates blocks of calls recorded and not recorded
// in one process, under the same host conditions (docs/performance.md). A snapshot of such a run
// misses the paused events: never for real use, hence not in include/cumemtrace.h.
#include <atomic>

#include "core/export.h"
#include "session/session.h"

namespace cumemtrace::preload {
extern std::atomic<bool> g_torch_blocks_paused;  // hooks/torch_tracker.cpp
extern std::atomic<bool> g_node_modules_paused;  // hooks/torch_sequence.cpp
}  // namespace cumemtrace::preload

// For bench/gpu/async_pool_pair.cu: while `paused` is nonzero no hook records anything (the hooks
// still run and call the driver). Returns 0 when the session was running (or paused) and now is
// as asked, -1 otherwise (not started yet, or off).
CUMEMTRACE_EXPORT int cumemtrace_bench_pause_recording(int paused) noexcept {
  return cumemtrace::preload::pause_recording_for_bench(paused);
}

// For bench/gpu/torch_blocks_ab.py: while `paused` is nonzero, PyTorch's block events are not
// recorded (PyTorch still builds and passes them: the tracker cannot be detached).
CUMEMTRACE_EXPORT void cumemtrace_bench_pause_torch_blocks(int paused) noexcept {
  cumemtrace::preload::g_torch_blocks_paused.store(paused != 0, std::memory_order_relaxed);
}

// For bench/bench_node_modules.py: while `paused` is nonzero, autograd nodes are numbered but not
// filed with their module (stacks/node_modules.h); everything else records as usual.
CUMEMTRACE_EXPORT void cumemtrace_bench_pause_node_modules(int paused) noexcept {
  cumemtrace::preload::g_node_modules_paused.store(paused != 0, std::memory_order_relaxed);
}
