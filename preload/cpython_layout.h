// Contract: where the CPython internals that the GIL-less Python frame reader (python_stack.cpp)
// walks lie in memory, for the interpreter versions it knows: CPython 3.11 and 3.12 on x86-64
// (LP64, release or debug build without Py_TRACE_REFS). Nothing here reads memory; any other
// version (3.13+ reorganized the frame and thread state) gets nullptr, and the reader keeps to
// the GIL-held public API. The numbers come from each version's headers; they are checked
// against real headers by tests/unit/cpython_layout_check.cpp (built where python3-dev is
// installed), against a live interpreter by tests/gpu/python_offsets_check.py, and at run time
// by the reader's structural validation (object types, bounds), which turns the reader off for
// the process on the first mismatch.
#pragma once

#include <cstdint>

namespace cumemtrace::preload {

struct CpythonLayout {
  unsigned minor;  // 11 or 12
  // PyThreadState: the _PyCFrame of the innermost evaluation loop, and its current frame.
  uint16_t tstate_cframe;
  uint16_t cframe_current_frame;
  // _PyInterpreterFrame
  uint16_t frame_code;        // PyCodeObject* f_code: a strong reference while the frame lives
  uint16_t frame_previous;    // the caller's frame, across evaluation loops
  uint16_t frame_prev_instr;  // _Py_CODEUNIT*: the unit before the next instruction
  uint16_t frame_owner;       // char: _frameowner
  int owner_cstack;           // FRAME_OWNED_BY_CSTACK (3.12 entry shim frames), -1: none
  // PyCodeObject
  uint16_t code_firstlineno;     // int
  uint16_t code_filename;        // str
  uint16_t code_name;            // str
  uint16_t code_firsttraceable;  // int, in code units: before it a frame is incomplete
  uint16_t code_adaptive;        // the bytecode (code units) starts here
  // str: sizeof(PyASCIIObject) (compact ASCII data follows it) and
  // sizeof(PyCompactUnicodeObject) (compact non-ASCII data follows it).
  uint16_t ascii_size;
  uint16_t compact_size;
};

// Layout facts shared by 3.11 and 3.12 on LP64.
inline constexpr unsigned kObType = 8;        // PyObject.ob_type
inline constexpr unsigned kObSize = 16;       // PyVarObject.ob_size (code: length in code units)
inline constexpr unsigned kStrLength = 16;    // PyASCIIObject.length (code points)
inline constexpr unsigned kStrHash = 24;      // PyASCIIObject.hash (-1 until computed)
inline constexpr unsigned kStrState = 32;     // PyASCIIObject.state bit field (32 bits)
inline constexpr unsigned kStrKindShift = 2;  // state.kind: bits 2..4 (1, 2 or 4 bytes a char)
inline constexpr unsigned kStrCompact = 1u << 5;
inline constexpr unsigned kStrAscii = 1u << 6;
inline constexpr unsigned kCodeUnitBytes = 2;  // sizeof(_Py_CODEUNIT)
inline constexpr int kOwnedByGenerator = 1;    // FRAME_OWNED_BY_GENERATOR in both
inline constexpr int kMaxOwner = 3;            // owners are 0..2 (3.11) or 0..3 (3.12)

// The layout for a Py_Version / PY_VERSION_HEX value, or nullptr. Only final releases and
// release candidates: alphas and betas may still differ.
const CpythonLayout* cpython_layout(unsigned long version_hex) noexcept;

}  // namespace cumemtrace::preload
