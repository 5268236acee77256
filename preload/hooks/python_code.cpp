// CPython's code watcher entry points (3.12+), registered by our sitecustomize: they keep the
// Python frame reader's memos honest (stacks/python_stack.h).
#include "core/export.h"
#include "stacks/python_stack.h"

// CPython's PyCode_WatchCallback, registered with PyCode_AddWatcher: called with the GIL held for
// every code object made (event 0, PY_CODE_EVENT_CREATE) and freed (1, PY_CODE_EVENT_DESTROY,
// before its memory is); returns 0, as a watcher that raised nothing.
CUMEMTRACE_EXPORT int cumemtrace_python_code_event(int event, void* /*code*/) noexcept {
  cumemtrace::preload::note_code_event(event);
  return 0;
}

// The watcher's id from PyCode_AddWatcher (the sitecustomize calls this right after it): from
// then on every code object freed moves the generation, so the thread memos may trust it.
CUMEMTRACE_EXPORT void cumemtrace_python_code_watcher(int id) noexcept {
  cumemtrace::preload::note_code_watcher(id);
}
