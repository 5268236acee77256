#define STEP unwind_step_o2
#define RECURSE unwind_recurse_o2
#include "frames_impl.inc"

extern "C" __attribute__((noinline)) int unwind_step_plt(Chain* c, int level) {
  const int r = unwind_step_lib(c, level);
  asm volatile("" ::: "memory");
  return r + 1;
}
