// Contract: one tracing session per process image: the configuration (core/config.h), the ring
// memfd, the collector connection (inherited control socket, `cumemtrace run`'s rendezvous, or a
// collector started here) and the process hooks (exit, fork, SIGUSR2). It starts once, on the
// first event (ensure_session_slow(), declared in core/emitter.h, defined here); it is not
// async-signal-safe and must not be called from a hook's re-entered path. After fork the child
// starts over lazily with a session of its own. The top of the preload below the hooks: it
// includes the recorder, the stacks and the driver layers; none of them includes it.
#pragma once

namespace cumemtrace::preload {

// Writes this process's exit record when its session runs and is its own (not a vfork child's),
// then ends the process as _exit(status) does: for the interposed _exit()/_Exit().
[[noreturn]] void end_process_now(int status) noexcept;

// Keeps the rank text PyTorch's process group reported and records it once the session runs
// (kRankInfo). 0 when recorded or kept, -1 when refused (null, too long, tracing off, re-entered).
int keep_rank_info(const char* text) noexcept;

// A benchmark's in-process A/B: pauses (nonzero) or resumes recording of a running session.
// 0 when the session now is as asked, -1 otherwise (not started, or off).
int pause_recording_for_bench(int paused) noexcept;

}  // namespace cumemtrace::preload
