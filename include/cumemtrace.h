/* cumemtrace.h: name phases of a program and ask for snapshots, for cumemtrace.
 *
 * Contract: header only, no link-time dependency. Each call below is a no-op unless the program
 * runs under cumemtrace (`cumemtrace run`, or LD_PRELOAD=libcumemtrace.so), whose preloaded
 * library defines the functions: they are declared weak, and each macro calls its function only
 * when the dynamic linker resolved it. Strings are copied at once; any length is accepted (names
 * are cut at 3584 bytes). Thread-safe and cheap (one record in a shared-memory ring).
 *
 *   cumemtrace_mark(name)        a point in time: external_annotations entry stage "MARK"
 *   cumemtrace_range_push(name)  opens a range on this thread: stage "START"
 *   cumemtrace_range_pop()       closes this thread's innermost range: stage "END", same name
 *   cumemtrace_snapshot(tag)     writes EXE.PID.TAG.json with the state at this call, and
 *                                returns once the collector wrote it (at most ~10 s)
 *
 * The weak references are resolved at load time in a shared library or a PIE executable (the
 * default of current GCC and Clang). In a non-PIE executable the linker binds them to null for
 * good: compile the files that include this header with -fPIC there.
 */
#ifndef CUMEMTRACE_H
#define CUMEMTRACE_H

#ifdef __cplusplus
extern "C" {
#endif

void cumemtrace_mark(const char* name) __attribute__((weak));
void cumemtrace_range_push(const char* name) __attribute__((weak));
void cumemtrace_range_pop(void) __attribute__((weak));
void cumemtrace_snapshot(const char* tag) __attribute__((weak));

#ifdef __cplusplus
}
#endif

/* A function-like macro is not expanded again inside its own body: there the name means the
 * (possibly null) weak function. */
#define cumemtrace_mark(name) ((cumemtrace_mark) ? (cumemtrace_mark)(name) : (void)0)
#define cumemtrace_range_push(name) \
  ((cumemtrace_range_push) ? (cumemtrace_range_push)(name) : (void)0)
#define cumemtrace_range_pop() ((cumemtrace_range_pop) ? (cumemtrace_range_pop)() : (void)0)
#define cumemtrace_snapshot(tag) ((cumemtrace_snapshot) ? (cumemtrace_snapshot)(tag) : (void)0)

#endif /* CUMEMTRACE_H */
