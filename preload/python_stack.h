// Contract: the Python frames of the calling thread, for CPython targets (PyTorch). Found at run
// time through dlsym of CPython's public C API; no build-time dependency on Python, and nothing
// happens in a process without an initialized interpreter. Frames are taken only when the
// calling thread holds the GIL, innermost first, as (code object address, line) pairs. A code
// object seen for the first time is announced to the collector (file and function name) and kept
// alive with a reference of ours, so its address is never reused for another one. The garbage
// collector is paused while frames are read, so no Python finalizer (which could free CUDA
// memory from inside our hook) runs in between.
#pragma once

#include <cstdint>

namespace cumemtrace::preload {

// Writes up to `max` pairs into out[2*i], out[2*i+1]; returns the number of Python frames.
unsigned capture_python_stack(uint64_t* out, unsigned max) noexcept;

// Forgets the announced code objects (fork child: its collector has not seen them).
void python_stack_reset() noexcept;

}  // namespace cumemtrace::preload
