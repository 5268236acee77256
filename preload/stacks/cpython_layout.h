// Contract: where the CPython internals that the GIL-less Python frame reader (python_stack.cpp)
// walks lie in memory, for CPython 3.9 to 3.14 on x86-64 (LP64, GIL builds, without
// Py_TRACE_REFS). Three frame models:
//   3.9, 3.10   PyThreadState.frame -> PyFrameObject (f_back, f_code, int f_lasti)
//   3.11, 3.12  PyThreadState.cframe -> _PyCFrame.current_frame -> _PyInterpreterFrame
//   3.13, 3.14  PyThreadState.current_frame -> _PyInterpreterFrame (f_executable, instr_ptr)
// 3.9 to 3.12 use built-in tables taken from each version's headers; 3.13 and later take every
// offset from the interpreter's own _Py_DebugOffsets (the start of _PyRuntime: cookie
// "xdebugpy", PY_VERSION_HEX, free_threaded), whose field positions per version are built in.
// Nothing here reads memory except cpython_layout() reading the _Py_DebugOffsets it is given.
// The tables are checked against real headers by tests/preload/cpython_layout_check.cpp (the host's
// python3-dev) and tests/pythons (the headers and interpreters of other Debian suites), and at
// run time by the reader's structural validation (object types, bounds), which turns the reader
// off for the process on the first mismatch.
#pragma once

#include <cstdint>

namespace cumemtrace::preload {

enum class FrameModel : uint8_t {
  kFrameObject,   // 3.9, 3.10
  kCFrame,        // 3.11, 3.12
  kCurrentFrame,  // 3.13+
};

inline constexpr uint16_t kNoField = 0xffff;

struct CpythonLayout {
  unsigned minor;
  FrameModel model;
  // PyThreadState: frame (3.9/3.10), cframe (3.11/3.12) or current_frame (3.13+).
  uint16_t tstate_frame;
  uint16_t cframe_current_frame;  // _PyCFrame.current_frame (3.11/3.12)
  // The frame (PyFrameObject or _PyInterpreterFrame).
  uint16_t frame_code;        // f_code, or f_executable (3.13+; 3.14: a tagged _PyStackRef)
  uint16_t frame_previous;    // f_back or previous: the caller's frame, across evaluation loops
  uint16_t frame_instr;       // int f_lasti (3.9: bytes, 3.10: code units), _Py_CODEUNIT*
                              // prev_instr (3.11/3.12: the unit before the next instruction) or
                              // instr_ptr (3.13+: the current instruction)
  uint16_t frame_owner;       // char owner (3.11+), kNoField before
  uint16_t frame_localsplus;  // the first local (the first argument) of a _PyInterpreterFrame
                              // (3.11+; 3.14: a tagged _PyStackRef), kNoField before
  int owner_not_python;       // owners >= this are no Python code (3.12: the C stack's entry
                              // frame; 3.14 also the interpreter's), -1: none (3.11)
  int max_owner;              // owners are 0..max_owner
  bool executable_tagged;     // 3.14: the low two bits of f_executable are tags
  // PyCodeObject
  uint16_t code_filename;        // str
  uint16_t code_name;            // str: co_qualname where the version has it (3.11+), else co_name
  uint16_t code_firsttraceable;  // int, in code units: before it a frame is incomplete
                                 // (3.11/3.12); kNoField where unpublished
  uint16_t code_firstlineno;     // int co_firstlineno
  uint16_t code_linetable;       // bytes: co_lnotab (3.9), co_linetable (3.10+)
  uint16_t code_bytecode;        // 3.11+: offset of co_code_adaptive (code units, ob_size of
                                 // them); 3.9/3.10: the co_code bytes object's pointer
  // str: sizeof(PyASCIIObject) (compact ASCII data follows it) and
  // sizeof(PyCompactUnicodeObject) (compact non-ASCII data follows it).
  uint16_t ascii_size;
  uint16_t compact_size;
};

// Layout facts shared by 3.9 to 3.14 on LP64 GIL builds.
inline constexpr unsigned kObType = 8;        // PyObject.ob_type
inline constexpr unsigned kObSize = 16;       // PyVarObject.ob_size (code: length in code units)
inline constexpr unsigned kStrLength = 16;    // PyASCIIObject.length (code points)
inline constexpr unsigned kStrHash = 24;      // PyASCIIObject.hash (-1 until computed)
inline constexpr unsigned kStrState = 32;     // PyASCIIObject.state bit field (32 bits)
inline constexpr unsigned kStrKindShift = 2;  // state.kind: bits 2..4 (1, 2 or 4 bytes a char)
inline constexpr unsigned kStrCompact = 1u << 5;
inline constexpr unsigned kStrAscii = 1u << 6;
inline constexpr unsigned kCodeUnitBytes = 2;  // sizeof(_Py_CODEUNIT), and 3.9's instructions
inline constexpr int kOwnedByGenerator = 1;    // FRAME_OWNED_BY_GENERATOR in 3.11+

// Why a version has no layout (cpython_layout's result).
enum class LayoutVerdict : uint8_t {
  kKnown,
  kUnknownVersion,   // not 3.9-3.14, or an alpha/beta
  kFreeThreaded,     // a free-threaded (no GIL) build: other frame and reference layouts
  kBadDebugOffsets,  // 3.13+ without a sound _Py_DebugOffsets at _PyRuntime
};

// The layout of the running interpreter: `version_hex` is its PY_VERSION_HEX (Py_Version, or
// parsed from Py_GetVersion() before 3.11); `runtime` its _PyRuntime (3.13+: read for the
// _Py_DebugOffsets at its start; may be nullptr before). Only final releases and release
// candidates: alphas and betas may still differ.
LayoutVerdict cpython_layout(unsigned long version_hex, const void* runtime,
                             CpythonLayout* out) noexcept;

// PY_VERSION_HEX of a Py_GetVersion() string ("3.10.12 (main, ...)", "3.9.2rc1 ..."), 0 when
// it does not parse.
unsigned long parse_python_version(const char* text) noexcept;

}  // namespace cumemtrace::preload
