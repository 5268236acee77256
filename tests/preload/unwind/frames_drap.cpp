// A frame whose CFA is a DWARF expression: stack realignment with a dynamic allocation makes
// GCC keep the incoming stack pointer in a register (DRAP). Beyond the fast unwinder's rule model.
#include <alloca.h>

#include "frames.h"

using cumemtrace::unwind_test::Chain;

extern "C" __attribute__((noinline)) int unwind_step_drap(Chain* c, int level) {
  alignas(64) volatile char aligned[64];
  aligned[0] = static_cast<char>(level);
  volatile char* scratch = static_cast<volatile char*>(alloca(1 + c->alloca_bytes[level]));
  scratch[0] = 1;
  int r = 0;
  if (level + 1 < c->depth) {
    r = c->steps[level + 1](c, level + 1);
  } else {
    c->leaf(c);
  }
  asm volatile("" ::: "memory");
  return r + aligned[0] + scratch[0];
}
