#define STEP unwind_step_o2
#define RECURSE unwind_recurse_o2
#include "frames_impl.inc"

extern "C" __attribute__((noinline)) int unwind_step_plt(Chain* c, int level) {
  const int r = unwind_step_lib(c, level);
  asm volatile("" ::: "memory");
  return r + 1;
}

// Keeps a value in rbp across its call, as code built without frame pointers does with any
// callee-saved register: rbp (saved in this frame's prologue) then holds a different number at
// every call, which the callee saves in turn where a walk restores the caller's rbp from.
volatile uint64_t unwind_test_salt = 0;  // declared extern "C" in frames.h

extern "C" __attribute__((noinline)) int unwind_step_rbp_data(Chain* c, int level) {
  register uint64_t kept asm("rbp") = unwind_test_salt + static_cast<uint64_t>(level);
  asm volatile("" : "+r"(kept));
  int r = 0;
  if (level + 1 < c->depth) {
    r = c->steps[level + 1](c, level + 1);
  } else {
    c->leaf(c);
  }
  asm volatile("" : "+r"(kept)::"memory");
  return r + static_cast<int>(kept & 1);
}
