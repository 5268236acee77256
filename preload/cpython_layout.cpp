#include "cpython_layout.h"

namespace cumemtrace::preload {

namespace {

// CPython 3.11: Include/cpython/pystate.h (struct _ts: prev, next, interp, 2 ints, 3 recursion
// ints, tracing, tracing_what, then cframe at 56; _PyCFrame: uint8_t use_tracing, then
// current_frame at 8), Include/internal/pycore_frame.h (f_func, f_globals, f_builtins,
// f_locals, f_code at 32, frame_obj, previous at 48, prev_instr at 56, int stacktop, bool
// is_entry, char owner at 69), Include/cpython/code.h (_PyCode_DEF), unicodeobject.h
// (PyASCIIObject still has wchar_t* wstr: 48; PyCompactUnicodeObject adds utf8_length, utf8,
// wstr_length: 72). Verified with offsetof against Debian's 3.11.2 headers.
constexpr CpythonLayout k311{
    .minor = 11,
    .tstate_cframe = 56,
    .cframe_current_frame = 8,
    .frame_code = 32,
    .frame_previous = 48,
    .frame_prev_instr = 56,
    .frame_owner = 69,
    .owner_cstack = -1,
    .code_firstlineno = 72,
    .code_filename = 112,
    .code_name = 120,
    .code_firsttraceable = 168,
    .code_adaptive = 184,
    .ascii_size = 48,
    .compact_size = 72,
};

// CPython 3.12: struct _ts has a 4-byte _status bit field, 6 ints, then cframe at 56;
// _PyCFrame lost use_tracing (current_frame at 0); _PyInterpreterFrame starts with f_code and
// previous, then f_funcobj, f_globals, f_builtins, f_locals, frame_obj, prev_instr at 56, int
// stacktop, uint16_t return_offset, char owner at 70, with FRAME_OWNED_BY_CSTACK = 3 for the
// entry shim frame of each evaluation loop; PyCodeObject: co_flags then 5 ints (co_firstlineno
// at 68), 5 ints + co_version, 7 pointers (co_filename 112, co_name 120), _co_cached,
// _co_instrumentation_version, _co_monitoring, _co_firsttraceable at 176, co_extra,
// co_code_adaptive at 192; PyASCIIObject lost wstr (40), PyCompactUnicodeObject lost
// wstr_length (56).
constexpr CpythonLayout k312{
    .minor = 12,
    .tstate_cframe = 56,
    .cframe_current_frame = 0,
    .frame_code = 0,
    .frame_previous = 8,
    .frame_prev_instr = 56,
    .frame_owner = 70,
    .owner_cstack = 3,
    .code_firstlineno = 68,
    .code_filename = 112,
    .code_name = 120,
    .code_firsttraceable = 176,
    .code_adaptive = 192,
    .ascii_size = 40,
    .compact_size = 56,
};

}  // namespace

const CpythonLayout* cpython_layout(unsigned long v) noexcept {
#if defined(__x86_64__)
  const unsigned long major = (v >> 24) & 0xff, minor = (v >> 16) & 0xff, level = (v >> 4) & 0xf;
  if (major != 3 || (level != 0xc && level != 0xf)) return nullptr;
  if (minor == 11) return &k311;
  if (minor == 12) return &k312;
#else
  (void)v;
#endif
  return nullptr;
}

}  // namespace cumemtrace::preload
