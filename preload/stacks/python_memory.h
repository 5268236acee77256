// Contract: the GIL-less Python frame reader's reads of CPython's memory (python_stack.h says
// why they are sound): the interpreter's types and layout found at run time (g_raw), bytes read in
// place once the layout is trusted or through process_vm_readv while it is on probation
// (`checked`), and the text of str objects (a code object's file and function names). Per-frame
// reads are inline: the walk calls nothing for a frame its memo answers. Nothing here allocates,
// locks or throws; a read that fails returns false, and one the kernel refuses turns the reader
// off.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "stacks/cpython_layout.h"

namespace cumemtrace::preload::pymem {

// What the GIL-less reader needs besides the layout.
struct RawApi {
  CpythonLayout layout;
  uintptr_t code_type;           // &PyCode_Type
  uintptr_t str_type;            // &PyUnicode_Type
  uintptr_t frame_type;          // &PyFrame_Type (3.9/3.10: frames are objects)
  uintptr_t bytes_type;          // &PyBytes_Type (3.9/3.10: co_code)
  void* (*this_tstate)();        // PyGILState_GetThisThreadState: a TSS lookup, no GIL needed
  void* (*main_interp)();        // PyInterpreterState_Main: a field of the runtime, no GIL needed
  int (*addr2line)(void*, int);  // PyCode_Addr2Line: reads the code's line table only
  unsigned frame_span;           // bytes of a frame read: every field used lies inside
  unsigned code_span;            // bytes of a code object read
};

// Set once by the reader's resolution (python_stack.cpp), before g_raw_on.
extern RawApi g_raw;
// The GIL-less reader is on: frames of threads without the GIL are read from memory.
extern std::atomic<bool> g_raw_on;

// Turns the GIL-less reader off for the process (one line under CUMEMTRACE_DEBUG, saying why).
void raw_off(const char* why) noexcept;

// fetch()'s copy through process_vm_readv, which fails on an unmapped address instead of faulting.
bool fetch_checked(void* dst, uintptr_t src, size_t n) noexcept;

// Copies n bytes at address src. `checked`: through process_vm_readv (the layout is still on
// probation).
inline bool fetch(void* dst, uintptr_t src, size_t n, bool checked) noexcept {
  if (src == 0 || src + n < src) return false;
  if (checked) return fetch_checked(dst, src, n);
  std::memcpy(dst, reinterpret_cast<const void*>(src), n);
  return true;
}

// The n bytes at src to read fields from: in place once the layout is trusted (no copy: a
// frame and its code object are a few hundred bytes, copied at every frame of every event),
// else copied into buf through process_vm_readv. Null when they cannot be read.
inline const unsigned char* view(unsigned char* buf, uintptr_t src, size_t n,
                                 bool checked) noexcept {
  if (!checked)
    return src == 0 || src + n < src ? nullptr : reinterpret_cast<const unsigned char*>(src);
  return fetch(buf, src, n, true) ? buf : nullptr;
}

template <typename T>
T field(const unsigned char* buf, unsigned off) noexcept {
  T v;
  std::memcpy(&v, buf + off, sizeof v);
  return v;
}

inline bool plausible_object(uintptr_t p) noexcept {
  return p >= 4096 && (p & 7) == 0;
}

// The text of str `s` as valid UTF-8 without NUL, truncated to `room` bytes (and 256 characters).
// Compact strings (all that code objects hold in practice) are decoded from their 1-, 2- or 4-byte
// data; anything else reads "?". Returns false when `s` is not a str.
bool read_str(uintptr_t s, char* out, size_t room, size_t* len, bool checked) noexcept;

// A key of the text of str `s`: Python's own cached hash when it was computed (a content hash,
// and free to read), else a hash of its bytes (compact ASCII, read in place) or of the text as
// announced. Equal text may give different keys (an extra announcement); different
// text gives equal keys only by a 64-bit collision.
bool str_key(uintptr_t s, uint64_t* key, bool checked) noexcept;

}  // namespace cumemtrace::preload::pymem
