// Contract: raw return addresses of the calling thread, innermost first, with cumemtrace's own
// frames removed. No allocation, no lock beyond what the platform unwinder takes (only on a
// rule-cache miss or a fallback). The cached CFI walker (cfi_unwinder.h) does the work; a stack
// it cannot handle is redone by _Unwind_Backtrace, as is every stack when CUMEMTRACE_SLOW_UNWIND=1
// is set. Symbolization is the collector's job; module_map.h tells it where each module was
// loaded.
#pragma once

#include <cstdint>

#include "stacks/cfi_unwinder.h"

namespace cumemtrace::preload {

// `first_seen` (optional) gets the frames that may lie in a module the collector has not been
// told about (cfi_unwinder.h: FirstSeen): the recorder checks only those against the module map.
// The walk ends with the frame whose stack frame holds `stop_at` (cfi_unwinder.h). `start`: where
// the cached walker starts (cfi::WalkStart; the slow path walks from its own frame and skips).
// `stop_in`: code whose first frame ends this walk instead of the process-wide stop function.
unsigned capture_stack(uint64_t* out, unsigned max_depth, cfi::FirstSeen* first_seen = nullptr,
                       uint64_t stop_at = 0, const cfi::WalkStart* start = nullptr,
                       const cfi::CodeRange* stop_in = nullptr) noexcept;

// The executable range of the loaded module that holds `addr` (its PT_LOAD segments with PF_X);
// false when no module does.
bool module_text(const void* addr, cfi::CodeRange& out) noexcept;

}  // namespace cumemtrace::preload
