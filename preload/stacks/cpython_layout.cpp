#include "stacks/cpython_layout.h"

#include <cstring>

namespace cumemtrace::preload {

namespace {

// CPython 3.9: Include/cpython/pystate.h (struct _ts: prev, next, interp, then frame at 24),
// Include/cpython/frameobject.h (PyObject_VAR_HEAD, f_back at 24, f_code at 32, f_builtins,
// f_globals, f_locals, f_valuestack, f_stacktop, f_trace, 2 chars, f_gen, int f_lasti at 104,
// in bytes), Include/code.h (6 ints, co_firstlineno at 40, co_code at 48, co_consts, co_names,
// co_varnames, co_freevars, co_cellvars, co_cell2arg, co_filename at 104, co_name at 112,
// co_lnotab at 120; no co_qualname), unicodeobject.h (PyASCIIObject with wstr: 48;
// PyCompactUnicodeObject: 72).
constexpr CpythonLayout k309{
    .minor = 9,
    .model = FrameModel::kFrameObject,
    .tstate_frame = 24,
    .cframe_current_frame = kNoField,
    .frame_code = 32,
    .frame_previous = 24,
    .frame_instr = 104,
    .frame_owner = kNoField,
    .frame_localsplus = kNoField,
    .owner_not_python = -1,
    .max_owner = 0,
    .executable_tagged = false,
    .code_filename = 104,
    .code_name = 112,
    .code_firsttraceable = kNoField,
    .code_firstlineno = 40,
    .code_linetable = 120,
    .code_bytecode = 48,
    .ascii_size = 48,
    .compact_size = 72,
};

// CPython 3.10: as 3.9, but PyFrameObject lost f_stacktop and gained int f_stackdepth after
// f_trace: f_lasti at 96, now in code units. PyCodeObject's co_lnotab became co_linetable at
// the same place; the offsets used here are unchanged. Cross-checked with py-spy's bindings
// generated from the 3.10 headers (3.10 is in no Debian release to test on).
constexpr CpythonLayout k310{
    .minor = 10,
    .model = FrameModel::kFrameObject,
    .tstate_frame = 24,
    .cframe_current_frame = kNoField,
    .frame_code = 32,
    .frame_previous = 24,
    .frame_instr = 96,
    .frame_owner = kNoField,
    .frame_localsplus = kNoField,
    .owner_not_python = -1,
    .max_owner = 0,
    .executable_tagged = false,
    .code_filename = 104,
    .code_name = 112,
    .code_firsttraceable = kNoField,
    .code_firstlineno = 40,
    .code_linetable = 120,
    .code_bytecode = 48,
    .ascii_size = 48,
    .compact_size = 72,
};

// CPython 3.11: Include/cpython/pystate.h (struct _ts: prev, next, interp, 2 ints, 3 recursion
// ints, tracing, tracing_what, then cframe at 56; _PyCFrame: uint8_t use_tracing, then
// current_frame at 8), Include/internal/pycore_frame.h (f_func, f_globals, f_builtins,
// f_locals, f_code at 32, frame_obj, previous at 48, prev_instr at 56, int stacktop, bool
// is_entry, char owner at 69), Include/cpython/code.h (_PyCode_DEF: co_firstlineno 72, co_filename
// 112, co_name 120, co_qualname 128, co_linetable 136), unicodeobject.h (PyASCIIObject still has
// wchar_t* wstr: 48; PyCompactUnicodeObject adds utf8_length, utf8, wstr_length: 72).
constexpr CpythonLayout k311{
    .minor = 11,
    .model = FrameModel::kCFrame,
    .tstate_frame = 56,
    .cframe_current_frame = 8,
    .frame_code = 32,
    .frame_previous = 48,
    .frame_instr = 56,
    .frame_owner = 69,
    .frame_localsplus = 72,
    .owner_not_python = -1,
    .max_owner = 2,
    .executable_tagged = false,
    .code_filename = 112,
    .code_name = 128,
    .code_firsttraceable = 168,
    .code_firstlineno = 72,
    .code_linetable = 136,
    .code_bytecode = 184,
    .ascii_size = 48,
    .compact_size = 72,
};

// CPython 3.12: struct _ts has a 4-byte _status bit field, 6 ints, then cframe at 56;
// _PyCFrame lost use_tracing (current_frame at 0); _PyInterpreterFrame starts with f_code and
// previous, then f_funcobj, f_globals, f_builtins, f_locals, frame_obj, prev_instr at 56, int
// stacktop, uint16_t return_offset, char owner at 70, with FRAME_OWNED_BY_CSTACK = 3 for the
// entry shim frame of each evaluation loop; PyCodeObject: co_firstlineno 68, 7 pointers from
// co_filename 112 (co_name 120, co_qualname 128, co_linetable 136), _co_firsttraceable at 176,
// co_code_adaptive at 192; PyASCIIObject lost wstr (40), PyCompactUnicodeObject lost wstr_length
// (56).
constexpr CpythonLayout k312{
    .minor = 12,
    .model = FrameModel::kCFrame,
    .tstate_frame = 56,
    .cframe_current_frame = 0,
    .frame_code = 0,
    .frame_previous = 8,
    .frame_instr = 56,
    .frame_owner = 70,
    .frame_localsplus = 72,
    .owner_not_python = 3,
    .max_owner = 3,
    .executable_tagged = false,
    .code_filename = 112,
    .code_name = 128,
    .code_firsttraceable = 176,
    .code_firstlineno = 68,
    .code_linetable = 136,
    .code_bytecode = 192,
    .ascii_size = 40,
    .compact_size = 56,
};

// Positions of the fields read from _Py_DebugOffsets (all uint64_t), per version: 3.13's
// Include/internal/pycore_runtime.h, 3.14's Include/internal/pycore_debug_offsets.h.
struct DebugOffsetPositions {
  unsigned free_threaded;
  unsigned tstate_current_frame;
  unsigned frame_size, frame_previous, frame_executable, frame_instr_ptr, frame_localsplus,
      frame_owner;
  unsigned code_size, code_filename, code_qualname, code_linetable, code_firstlineno;
  unsigned code_adaptive;
  unsigned unicode_ascii_size;  // 0: not published (3.13)
};

// 3.13: cookie[8], version, free_threaded, runtime_state (3 words), interpreter_state (13),
// thread_state (size, prev, next, interp, current_frame, ...), interpreter_frame (size,
// previous, executable, instr_ptr, localsplus, owner), code_object (size, filename, name,
// qualname, linetable, firstlineno, argcount, localsplusnames, localspluskinds,
// co_code_adaptive).
constexpr DebugOffsetPositions kDebug313{
    .free_threaded = 16,
    .tstate_current_frame = 184,
    .frame_size = 224,
    .frame_previous = 232,
    .frame_executable = 240,
    .frame_instr_ptr = 248,
    .frame_localsplus = 256,
    .frame_owner = 264,
    .code_size = 272,
    .code_filename = 280,
    .code_qualname = 296,
    .code_linetable = 304,
    .code_firstlineno = 312,
    .code_adaptive = 344,
    .unicode_ascii_size = 0,
};

// 3.14: interpreter_state gained threads_main, code_object_generation and tlbc_generation
// (16 words), interpreter_frame stackpointer and tlbc_index, code_object co_tlbc; set_object
// (4 words) came before dict_object; unicode_object (size, state, length, asciiobject_size)
// follows bytes_object.
constexpr DebugOffsetPositions kDebug314{
    .free_threaded = 16,
    .tstate_current_frame = 208,
    .frame_size = 248,
    .frame_previous = 256,
    .frame_executable = 264,
    .frame_instr_ptr = 272,
    .frame_localsplus = 280,
    .frame_owner = 288,
    .code_size = 312,
    .code_filename = 320,
    .code_qualname = 336,
    .code_linetable = 344,
    .code_firstlineno = 352,
    .code_adaptive = 384,
    .unicode_ascii_size = 640,
};

uint64_t word(const void* base, unsigned at) noexcept {
  uint64_t v;
  std::memcpy(&v, static_cast<const char*>(base) + at, sizeof v);
  return v;
}

LayoutVerdict from_debug_offsets(unsigned minor, unsigned long version_hex, const void* runtime,
                                 CpythonLayout* out) noexcept {
  if (!runtime) return LayoutVerdict::kBadDebugOffsets;
  const DebugOffsetPositions& P = minor == 13 ? kDebug313 : kDebug314;
  if (std::memcmp(runtime, "xdebugpy", 8) != 0) return LayoutVerdict::kBadDebugOffsets;
  if (word(runtime, 8) != version_hex) return LayoutVerdict::kBadDebugOffsets;
  if (word(runtime, P.free_threaded) != 0) return LayoutVerdict::kFreeThreaded;
  // Sizes: of _PyInterpreterFrame and PyCodeObject (whose bytecode starts at co_code_adaptive,
  // inside its size: the array's first unit is declared).
  const uint64_t frame_size = word(runtime, P.frame_size), code_size = word(runtime, P.code_size);
  // Each offset must lie inside its structure (and fit the reader's buffers).
  const auto inside = [](uint64_t off, uint64_t size, uint64_t width) {
    return size <= 1024 && off + width <= size;
  };
  const uint64_t ts_frame = word(runtime, P.tstate_current_frame);
  const uint64_t previous = word(runtime, P.frame_previous);
  const uint64_t executable = word(runtime, P.frame_executable);
  const uint64_t instr = word(runtime, P.frame_instr_ptr);
  const uint64_t owner = word(runtime, P.frame_owner);
  const uint64_t localsplus = word(runtime, P.frame_localsplus);
  const uint64_t filename = word(runtime, P.code_filename);
  const uint64_t qualname = word(runtime, P.code_qualname);
  const uint64_t linetable = word(runtime, P.code_linetable);
  const uint64_t firstlineno = word(runtime, P.code_firstlineno);
  const uint64_t adaptive = word(runtime, P.code_adaptive);
  const uint64_t ascii = P.unicode_ascii_size ? word(runtime, P.unicode_ascii_size) : 40;
  if (ts_frame > 4096 || !inside(previous, frame_size, 8) || !inside(executable, frame_size, 8) ||
      !inside(instr, frame_size, 8) || !inside(owner, frame_size, 1) ||
      !inside(localsplus, frame_size, 8) || !inside(filename, code_size, 8) ||
      !inside(qualname, code_size, 8) || !inside(linetable, code_size, 8) ||
      !inside(firstlineno, code_size, 4) || !inside(adaptive, code_size, kCodeUnitBytes) ||
      ascii != 40) {
    return LayoutVerdict::kBadDebugOffsets;
  }
  *out = CpythonLayout{
      .minor = minor,
      .model = FrameModel::kCurrentFrame,
      .tstate_frame = static_cast<uint16_t>(ts_frame),
      .cframe_current_frame = kNoField,
      .frame_code = static_cast<uint16_t>(executable),
      .frame_previous = static_cast<uint16_t>(previous),
      .frame_instr = static_cast<uint16_t>(instr),
      .frame_owner = static_cast<uint16_t>(owner),
      .frame_localsplus = static_cast<uint16_t>(localsplus),
      // 3.13: FRAME_OWNED_BY_CSTACK = 3; 3.14: FRAME_OWNED_BY_INTERPRETER = 3, _CSTACK = 4.
      .owner_not_python = 3,
      .max_owner = minor == 13 ? 3 : 4,
      .executable_tagged = minor >= 14,
      .code_filename = static_cast<uint16_t>(filename),
      .code_name = static_cast<uint16_t>(qualname),
      .code_firsttraceable = kNoField,
      .code_firstlineno = static_cast<uint16_t>(firstlineno),
      .code_linetable = static_cast<uint16_t>(linetable),
      .code_bytecode = static_cast<uint16_t>(adaptive),
      .ascii_size = 40,
      .compact_size = 56,  // PyCompactUnicodeObject: utf8_length and utf8 after PyASCIIObject
  };
  return LayoutVerdict::kKnown;
}

}  // namespace

LayoutVerdict cpython_layout(unsigned long v, const void* runtime, CpythonLayout* out) noexcept {
#if defined(__x86_64__)
  const unsigned long major = (v >> 24) & 0xff, minor = (v >> 16) & 0xff, level = (v >> 4) & 0xf;
  if (major != 3 || (level != 0xc && level != 0xf)) return LayoutVerdict::kUnknownVersion;
  switch (minor) {
    case 9:
      *out = k309;
      return LayoutVerdict::kKnown;
    case 10:
      *out = k310;
      return LayoutVerdict::kKnown;
    case 11:
      *out = k311;
      return LayoutVerdict::kKnown;
    case 12:
      *out = k312;
      return LayoutVerdict::kKnown;
    case 13:
    case 14:
      return from_debug_offsets(static_cast<unsigned>(minor), v, runtime, out);
    default:
      return LayoutVerdict::kUnknownVersion;
  }
#else
  (void)v;
  (void)runtime;
  (void)out;
  return LayoutVerdict::kUnknownVersion;
#endif
}

unsigned long parse_python_version(const char* s) noexcept {
  if (!s) return 0;
  unsigned long part[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    if (*s < '0' || *s > '9') return 0;
    while (*s >= '0' && *s <= '9') part[i] = part[i] * 10 + static_cast<unsigned long>(*s++ - '0');
    if (part[i] > 255) return 0;
    if (i < 2 && *s++ != '.') return 0;
  }
  // A final release ends its number here; "a", "b" or "rc" and a serial follow otherwise.
  unsigned long level = 0xf, serial = 0;
  if (s[0] == 'a' || s[0] == 'b' || (s[0] == 'r' && s[1] == 'c')) {
    level = s[0] == 'a' ? 0xa : s[0] == 'b' ? 0xb : 0xc;
    s += level == 0xc ? 2 : 1;
    if (*s < '0' || *s > '9') return 0;
    while (*s >= '0' && *s <= '9') serial = serial * 10 + static_cast<unsigned long>(*s++ - '0');
    if (serial > 15) return 0;
  }
  if (*s != ' ' && *s != '\0' && *s != '+') return 0;
  return part[0] << 24 | part[1] << 16 | part[2] << 8 | level << 4 | serial;
}

}  // namespace cumemtrace::preload
