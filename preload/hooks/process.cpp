// The process-level entry points: _exit()/_Exit() (interposed: a process that ends without its
// atexit handlers still gets its exit record) and the rank the preload's Python side reports.
// Each hands over to the session (session/session.h).
#include "core/export.h"
#include "session/session.h"

// The rank of this process as torch.distributed knows it (lines of key=value: torch.distributed.
// rank, .world_size, .local_rank), called by the preload's Python side (cumemtrace_ranks.py)
// after init_process_group returned: a torch.multiprocessing.spawn worker has no launcher
// variables. Recorded now when tracing runs; otherwise kept until the session starts (a process
// that never uses CUDA never starts one for it). Returns 0 when recorded or kept, -1 otherwise.
CUMEMTRACE_EXPORT int cumemtrace_rank_info(const char* text) noexcept {
  return cumemtrace::preload::keep_rank_info(text);
}

// glibc declares _exit without noexcept and _Exit with it (__THROW): each as declared.
CUMEMTRACE_EXPORT void _exit(int status) {
  cumemtrace::preload::end_process_now(status);
}

CUMEMTRACE_EXPORT void _Exit(int status) noexcept {
  cumemtrace::preload::end_process_now(status);
}
