// Contract: a caching DWARF-CFI stack walker for x86-64 Linux, safe to call from any thread and
// from signal handlers of the process it runs in.
//
// unwind_fast() walks the calling thread's stack from its own registers (unwind_fast_from(): from
// those of a live frame further out, WalkStart below) using per-address rules
// (cfi_rules.h: CFA = rsp/rbp + N, return address and caller's rbp at fixed offsets from the CFA)
// kept in a global lock-free cache, fronted by a per-thread memo of the thread's last 32 walks
// with an index of their frames (a frame at the same stack address with the same return address
// as in one of them takes its rule from there, and the frames after it are taken whole for as
// long as the stack slots they were read from are unchanged, checked with independent reads
// instead of a chain of dependent ones) and a small per-thread table of rules by address (dense,
// so it stays in the core's own caches where the global table's scattered entries come from the
// shared L3: about 35 ns a frame on the GPU host between PyTorch's allocations), and, ahead of
// all of them, the thread's last short walk that ended in its stop function, replayed whole while
// the stack slots it read hold the same (a PyTorch pool tensor's walk to the allocator); a miss
// parses the FDE that libgcc's _Unwind_Find_FDE finds (cfi_rules.cpp). It never allocates, takes
// no lock on a hit, and never reads outside [its own rsp, the top of the mapping that holds it).
// Whenever a frame needs more than that rule model (signal frames, CFA expressions, code without
// unwind info, a stack it cannot bound) it gives up with kFallback and the caller must use
// unwind_slow() (_Unwind_Backtrace) for that stack. Both report the same frames: return addresses,
// innermost first, leading frames inside [skip_lo, skip_hi) dropped, at most max_depth of them,
// ending with the frame whose stack frame holds the address `stop_at` when one does (the recorder's
// stop: CPython's evaluation loop, whose callers the event's Python frames describe; an address
// outside the thread's stack stops nothing). The first frame unwind_fast() sees is its own;
// unwind_slow()'s is the return address into its own body.
//
// Cached rules are keyed by address only: code unloaded by dlclose and replaced by other code at
// the same address would be unwound with stale rules (wrong frames, never a read outside the
// stack), and its frames would not count as first seen (FirstSeen below): the new module is then
// announced only once a frame outside the old one's cached addresses meets it.
#pragma once

#include <cstdint>

namespace cumemtrace::preload::cfi {

inline constexpr int kFallback = -1;

// The frames of a walk that the walker met for the first time (their rule was not cached), plus
// the last frame when the walk stopped at max_depth or at the stop function (its rule was never
// looked up): the only frames that can lie in a module loaded since the module map was last sent
// (module_map.h), so the only ones the recorder checks against it. `all`: check every frame (more
// than fit, or the stack came from unwind_slow, which caches nothing).
struct FirstSeen {
  static constexpr unsigned kMax = 16;
  uint64_t pcs[kMax];
  unsigned n = 0;
  bool all = false;
  void add(uint64_t pc) noexcept {
    if (n < kMax) {
      pcs[n++] = pc;
    } else {
      all = true;
    }
  }
};

// Where a walk may start instead of unwind_fast()'s own frame: the pc, rsp and rbp of one
// instruction of a function that is still running (it called, directly or not, the function that
// walks). The frames in between are never walked: the recorder starts at the hook that took the
// event, so its own five or six frames, which it would skip anyway, cost nothing. Valid only while
// that function has not returned, on its own thread; pc 0: none.
struct WalkStart {
  uint64_t pc = 0, sp = 0, fp = 0;
};
// The caller's own (pc, rsp, rbp), read by one asm statement, hence of one CFI row. Always inlined
// into the function whose frame it describes. A function that passes it down must not let the
// compiler turn that call into a tail call (passing its address keeps the frame alive).
__attribute__((always_inline)) inline WalkStart walk_start_here() noexcept {
  WalkStart s;
  asm volatile(
      "mov %%rbp, %2\n\t"
      "mov %%rsp, %1\n\t"
      "lea 0(%%rip), %0"
      : "=r"(s.pc), "=r"(s.sp), "=r"(s.fp));
  return s;
}

// A function whose frame ends every walk of both unwinders, that frame kept: for threads that run
// no Python, the loop that hands them their work (PyTorch's autograd engine thread:
// Engine::evaluate_function), as `stop_at` ends a Python thread's walk at CPython's evaluation
// loop. Above it every stack of the thread is the same few frames (thread_main, the thread's
// start, libc), which a walk would only pay for. [lo, hi): the function's code; lo == hi: none.
// Process-wide, for walks that start after the call.
void set_stop_function(uint64_t lo, uint64_t hi) noexcept;
// True when the return address `pc` lies in the process-wide stop function: a walk that ended
// there ran on a thread that function serves (the recorder's mark of autograd's engine thread).
bool in_stop_function(uint64_t pc) noexcept;

// Code whose first frame ends one walk, that frame kept: the walk's own `stop_in`, which takes
// the place of the process-wide stop function for that walk (the recorder's: PyTorch's
// cudaMallocAsync allocator, where a tensor's native frames end). [lo, hi); lo == hi: none.
struct CodeRange {
  uint64_t lo = 0, hi = 0;
  // A walk's frame `pc` lies in this code: a return address lies after its call, in (lo, hi],
  // the test the walker's own stops make.
  bool holds_return(uint64_t pc) const noexcept { return pc - lo - 1 < hi - lo; }
};

int unwind_fast(uint64_t* out, unsigned max_depth, uint64_t skip_lo, uint64_t skip_hi,
                FirstSeen* first_seen = nullptr, uint64_t stop_at = 0,
                const CodeRange* stop_in = nullptr) noexcept;
// The same walk from `start` instead of from unwind_fast()'s own frame: frame 0 is start.pc.
int unwind_fast_from(const WalkStart& start, uint64_t* out, unsigned max_depth, uint64_t skip_lo,
                     uint64_t skip_hi, FirstSeen* first_seen = nullptr, uint64_t stop_at = 0,
                     const CodeRange* stop_in = nullptr) noexcept;
int unwind_slow(uint64_t* out, unsigned max_depth, uint64_t skip_lo, uint64_t skip_hi,
                FirstSeen* first_seen = nullptr, uint64_t stop_at = 0,
                const CodeRange* stop_in = nullptr) noexcept;

// In a forked child: the calling thread (the child's only one) keeps its memo of the last walk
// under its new thread id, so that no other thread of the child takes it over.
void memo_after_fork() noexcept;

// Rule cache lookups by the calling thread since it started, for tests and benchmarks.
struct CacheStats {
  uint64_t hits;
  uint64_t misses;
  uint64_t fallbacks;
  uint64_t memo_hits;    // of the hits, those served by the thread's memo of its last walk
  uint64_t replayed;     // of those, frames taken whole from a memo whose slots still hold
  uint64_t short_walks;  // walks taken whole from the thread's short walk (its stack slots hold)
};
CacheStats thread_cache_stats() noexcept;

// Stacks unwind_fast() gave up on, process-wide, and the first distinct addresses whose frame it
// could not model (0: a stack it could not bound), for CUMEMTRACE_DEBUG's exit line.
struct FallbackStats {
  uint64_t stacks;
  uint64_t pcs[4];
};
FallbackStats fallback_stats() noexcept;

}  // namespace cumemtrace::preload::cfi
