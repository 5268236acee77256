// Contract: call chains for the unwinder tests, built from step functions that live in TUs
// compiled in different ways (-O0 with frame pointers, -O2 with and without them, a shared
// library reached through the PLT). A chain calls steps[0..depth) in turn, each step optionally
// allocating a variable-size frame, and the last one calls leaf(chain). Nothing is inlined or
// turned into a tail call, so every step is one real frame.
#pragma once

#include <cstdint>

namespace cumemtrace::unwind_test {

struct Chain;
using StepFn = int (*)(Chain*, int level);

inline constexpr int kMaxChain = 128;

struct Chain {
  int depth = 0;
  StepFn steps[kMaxChain] = {};
  unsigned alloca_bytes[kMaxChain] = {};
  void (*leaf)(Chain*) = nullptr;
  void* arg = nullptr;
};

inline int run_chain(Chain* c) {
  return c->steps[0](c, 0);
}

}  // namespace cumemtrace::unwind_test

extern "C" {
int unwind_step_o0(cumemtrace::unwind_test::Chain*, int);
int unwind_step_o2(cumemtrace::unwind_test::Chain*, int);
int unwind_step_o2fp(cumemtrace::unwind_test::Chain*, int);
int unwind_step_lib(cumemtrace::unwind_test::Chain*, int);
// Realigns its frame through a DRAP register: its CFA rule is an expression.
int unwind_step_drap(cumemtrace::unwind_test::Chain*, int);
// Holds unwind_test_salt + level in rbp across its call (a callee-saved register used for data).
int unwind_step_rbp_data(cumemtrace::unwind_test::Chain*, int);
extern volatile uint64_t unwind_test_salt;
// Calls unwind_step_lib directly, that is through the PLT.
int unwind_step_plt(cumemtrace::unwind_test::Chain*, int);
// Direct self-recursion n deep, then leaf(chain).
int unwind_recurse_o0(cumemtrace::unwind_test::Chain*, int n);
int unwind_recurse_o2(cumemtrace::unwind_test::Chain*, int n);
int unwind_recurse_o2fp(cumemtrace::unwind_test::Chain*, int n);
int unwind_recurse_lib(cumemtrace::unwind_test::Chain*, int n);
}
