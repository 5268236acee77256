// Contract: the Python frames of the calling thread, for CPython targets (PyTorch). Found at run
// time through dlsym of CPython's public C API; no build-time dependency on Python, and nothing
// happens in a process without an initialized interpreter. Frames come innermost first, as
// (code object address, line) pairs.
//
// CPython 3.9 to 3.14 on x86-64 (GIL builds; cpython_layout.h): the frames are read from the
// interpreter's memory, with or without the GIL (PyTorch releases it around every op, so its
// allocations happen without it). This is sound because the calling thread is blocked in our
// hook: its own frame chain cannot change and each frame holds a strong reference to its code
// object. The reader only reads: no Python call except PyGILState_GetThisThreadState and
// PyCode_Addr2Line (both pure lookups), no reference counting, no frame objects. The layout is
// validated as it is used (object types, bounds); the first frames of a process are read
// through process_vm_readv, which reports bad addresses instead of faulting, and any mismatch
// turns the reader off for the process (one "cumemtrace:" line under CUMEMTRACE_DEBUG).
// After such a mismatch: frames only when the calling thread holds the GIL, through the public
// frame API, with the garbage collector paused meanwhile (3.10+: PyGC_Disable).
// Another version (before 3.9, after 3.14, a pre-release) or a free-threaded build: one
// "cumemtrace:" line and no Python frames at all, rather than frames from a guessed layout.
// Names are qualified (co_qualname) where the version has them (3.11+), else co_name.
//
// A code object is announced to the collector (wire::Kind::kPyCode: file and function name)
// the first time its address is seen with its current (file, name), keyed by a signature of
// the two strings: the reader holds no reference, so an address may be reused by another code
// object, which is then announced again and replaces the earlier announcement for later
// records. The GIL-held fallback keeps its code objects alive with a reference instead.
// Each thread keeps a memo of the (code, instruction) answers it found, so that a frame met
// again (a training loop's every step) is one read of its code object's header instead of its
// names and two shared tables; any announcement makes every memo entry stale. From 3.12 on,
// where our sitecustomize registered a code watcher (cumemtrace_python_code_event: CPython calls
// it with the GIL held for every code object it frees), a frame met again is answered from its
// own (code, instruction) words alone, without a read of its code object, until any code object
// is freed.
#pragma once

#include <cstdint>

namespace cumemtrace::preload {

// Writes up to `max` pairs into out[2*i], out[2*i+1]; returns the number of Python frames.
// `loop_at` gets an address inside the C stack frame of the innermost evaluation loop
// (_PyEval_EvalFrameDefault) that runs them, where the interpreter keeps a local it links into
// the thread state (3.11+: its _PyCFrame, or its entry frame); 0 when unknown (3.9, 3.10, the
// GIL-held path). Native frames above that one are the interpreter running the Python frames
// returned, so the recorder's native walk may end there (its code may be split into pieces
// that no symbol bounds, as in Debian's 3.14: the stack address finds it regardless).
unsigned capture_python_stack(uint64_t* out, unsigned max, uint64_t* loop_at) noexcept;

// Forgets the announced code objects and every thread's memo of them (fork child: its collector
// has not seen them).
void python_stack_reset() noexcept;

// Frames the calling thread's captures answered from its memo since the thread started (the
// others took the long way: names, the shared tables, maybe the interpreter's line lookup), for
// CUMEMTRACE_DEBUG's meter.
uint64_t python_memo_hits() noexcept;
// Of those, the frames answered without a read of their code object (code objects watched).
uint64_t python_watched_hits() noexcept;

// torch.nn.Module._wrapped_call_impl's code object, which every module call runs (told once by
// the Python side, cumemtrace_torch_module_code): a frame of it gets the module it calls (its
// first local, `self`) in its line word (wire::kPyModuleTag), for CPython 3.11+ whose frames keep
// their locals in the frame (3.9 and 3.10: not read). False when told before or `code` is null.
// Why frames and not a module hook: a global forward hook slows every module call (it turns off
// Module._call_impl's fast path), while this costs one compare a frame and one load a module.
bool set_module_code(uint64_t code) noexcept;

// The calling thread's innermost module call: the line word (wire::kPyModuleTag, its line, the
// module object) of its innermost _wrapped_call_impl frame, read as capture_python_stack reads
// frames but only up to that one; 0 when it has none, no module code was told, or frames are not
// read from memory (3.9/3.10 and the GIL-held path carry no module either).
uint64_t innermost_module_word() noexcept;

// The code object set_module_code was told (0: none): the code of a module call's frame.
uint64_t module_code() noexcept;

// CPython's code watcher (3.12+, hooks/python_code.cpp): a code object was made (event 0) or is
// being freed (1: answers memoized for frames stop being trusted), and the watcher's id once
// registered (from then on the memos may trust the generation).
void note_code_event(int event) noexcept;
void note_code_watcher(int id) noexcept;

}  // namespace cumemtrace::preload
