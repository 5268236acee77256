// Contract: the CUDA ordinal a stream-ordered allocation (cuMemAllocAsync) lands on, known
// without a driver call per event. Such an allocation comes from the pool of its stream's device,
// which need not be the current context's. A created stream's device never changes, so each
// thread remembers the last stream it allocated on with that device, asked once
// (cuStreamGetDevice, CUDA 12.8+; a driver without it is asked for the current context's device
// every time, as before). A destroyed stream's handle may come back as another stream's, so every
// destruction of a stream (cuStreamDestroy, or of a context with its streams) first moves one
// global generation on, and a remembered answer counts only in the generation it was asked in.
// The default streams (0, legacy, per-thread) follow the current context: asked every time.
// Why: on the H200 host cuCtxGetDevice is 13-17 ns of a 650-1,200 ns pool-hit pair, a sixth of
// what recording adds to it (docs/performance.md). noexcept, no heap, no locks.
#pragma once

#include <cstdint>

namespace cumemtrace::preload {

// The device of an allocation just made on `stream` (its context current); -1 when unknown.
int async_stream_device(uint64_t stream) noexcept;

// Called before a stream, or a context with its streams, is destroyed.
void streams_changed() noexcept;

// CUMEMTRACE_DEBUG, at exit: how often a stream's device was asked and how many stream or context
// ends made the remembered answers stale (one line; nothing when both are 0).
void print_stream_device_stats() noexcept;

}  // namespace cumemtrace::preload
