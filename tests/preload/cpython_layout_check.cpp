// Checks preload/stacks/cpython_layout.cpp's table against the CPython headers this test is built
// with (python3-dev, including the internal headers): every offset the GIL-less frame reader
// uses, by offsetof. Exit 77 (skipped) for versions other than 3.11 and 3.12, whose headers
// name these fields differently (3.9/3.10 tables and 3.13+ debug offsets are checked against
// real interpreters by tests/pythons).
#define Py_BUILD_CORE 1
#include <Python.h>
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
#define CUMEMTRACE_KNOWN_CPYTHON 1
#include <internal/pycore_frame.h>
#endif

#include <cstddef>
#include <cstdio>
#include <cstring>

#include "stacks/cpython_layout.h"

namespace {

#ifdef CUMEMTRACE_KNOWN_CPYTHON
int failures = 0;

void expect(const char* what, size_t table, size_t headers) {
  const bool ok = table == headers;
  std::printf("%s %-40s table %4zu headers %4zu\n", ok ? "PASS" : "FAIL", what, table, headers);
  if (!ok) ++failures;
}

unsigned state_bits(void (*set)(PyASCIIObject&)) {
  PyASCIIObject o;
  std::memset(&o, 0, sizeof o);
  set(o);
  unsigned v = 0;
  std::memcpy(&v, reinterpret_cast<const char*>(&o) + offsetof(PyASCIIObject, state), sizeof v);
  return v;
}

#endif

}  // namespace

int main() {
  using namespace cumemtrace::preload;
#ifndef CUMEMTRACE_KNOWN_CPYTHON
  std::printf("SKIP: CPython %s is not 3.11 or 3.12\n", PY_VERSION);
  return 77;
#else
  CpythonLayout layout{};
  const CpythonLayout* L = &layout;
  if (cpython_layout(PY_VERSION_HEX, nullptr, &layout) != LayoutVerdict::kKnown) {
    std::printf("SKIP: no layout for CPython %s in the table\n", PY_VERSION);
    return 77;
  }
  std::printf("CPython %s headers\n", PY_VERSION);
  expect("minor", L->minor, PY_MINOR_VERSION);
  expect("PyThreadState.cframe", L->tstate_frame, offsetof(PyThreadState, cframe));
  expect("_PyCFrame.current_frame", L->cframe_current_frame, offsetof(_PyCFrame, current_frame));
  expect("_PyInterpreterFrame.f_code", L->frame_code, offsetof(_PyInterpreterFrame, f_code));
  expect("_PyInterpreterFrame.previous", L->frame_previous,
         offsetof(_PyInterpreterFrame, previous));
  expect("_PyInterpreterFrame.prev_instr", L->frame_instr,
         offsetof(_PyInterpreterFrame, prev_instr));
  expect("_PyInterpreterFrame.owner", L->frame_owner, offsetof(_PyInterpreterFrame, owner));
  expect("sizeof owner", 1, sizeof(_PyInterpreterFrame::owner));
  expect("_PyInterpreterFrame.localsplus", L->frame_localsplus,
         offsetof(_PyInterpreterFrame, localsplus));
#if PY_VERSION_HEX >= 0x030C0000
  expect("FRAME_OWNED_BY_CSTACK", static_cast<size_t>(L->owner_not_python), FRAME_OWNED_BY_CSTACK);
  expect("max owner", static_cast<size_t>(L->max_owner), FRAME_OWNED_BY_CSTACK);
#else
  expect("no FRAME_OWNED_BY_CSTACK (-1)", static_cast<size_t>(L->owner_not_python + 1), 0);
  expect("max owner", static_cast<size_t>(L->max_owner), FRAME_OWNED_BY_FRAME_OBJECT);
#endif
  expect("FRAME_OWNED_BY_GENERATOR", kOwnedByGenerator, FRAME_OWNED_BY_GENERATOR);
  expect("PyCodeObject.co_filename", L->code_filename, offsetof(PyCodeObject, co_filename));
  expect("PyCodeObject.co_qualname", L->code_name, offsetof(PyCodeObject, co_qualname));
  expect("PyCodeObject._co_firsttraceable", L->code_firsttraceable,
         offsetof(PyCodeObject, _co_firsttraceable));
  expect("PyCodeObject.co_firstlineno", L->code_firstlineno,
         offsetof(PyCodeObject, co_firstlineno));
  expect("PyCodeObject.co_linetable", L->code_linetable, offsetof(PyCodeObject, co_linetable));
  expect("PyCodeObject.co_code_adaptive", L->code_bytecode,
         offsetof(PyCodeObject, co_code_adaptive));
  expect("sizeof(_Py_CODEUNIT)", kCodeUnitBytes, sizeof(_Py_CODEUNIT));
  expect("sizeof(PyASCIIObject)", L->ascii_size, sizeof(PyASCIIObject));
  expect("sizeof(PyCompactUnicodeObject)", L->compact_size, sizeof(PyCompactUnicodeObject));
  expect("PyObject.ob_type", kObType, offsetof(PyObject, ob_type));
  expect("PyVarObject.ob_size", kObSize, offsetof(PyVarObject, ob_size));
  expect("PyASCIIObject.length", kStrLength, offsetof(PyASCIIObject, length));
  expect("PyASCIIObject.hash", kStrHash, offsetof(PyASCIIObject, hash));
  expect("PyASCIIObject.state", kStrState, offsetof(PyASCIIObject, state));
  expect("state.kind bits", 7u << kStrKindShift,
         state_bits([](PyASCIIObject& o) { o.state.kind = 7; }));
  expect("state.compact bit", kStrCompact,
         state_bits([](PyASCIIObject& o) { o.state.compact = 1; }));
  expect("state.ascii bit", kStrAscii, state_bits([](PyASCIIObject& o) { o.state.ascii = 1; }));
  std::printf("%s\n", failures ? "FAIL" : "PASS");
  return failures ? 1 : 0;
#endif
}
