// Contract: the Python frames of the thread that started the running backward pass, lent to
// autograd's engine threads. Those threads run no Python (PyTorch's CUDA device threads), so
// their allocations' stacks had only the autograd node that asked (autograd_node.h); with these
// frames behind the node, the one site rule (collector/analysis/frames.h) finds the user's
// `loss.backward()` line (or the trainer line that called backward) as their site, "via" the node.
//
// The Python side (cumemtrace_phases.py) lends its frames once per outermost backward, through
// cumemtrace_torch_backward_caller (torch_tracker.cpp), with the GIL held and never from an
// allocation hook; it takes them back when that backward returns. The caller's frames hold their
// code objects for as long as the backward runs, so the code addresses stay the ones announced.
// One process-wide slot: when two threads run backward at once, the latest lender's frames are
// lent (an engine thread cannot tell which graph task its node belongs to without torch's
// internals).
//
// The hook reads the slot under a sequence lock, without waiting: a read that overlaps a write
// gets no frames (the node alone stands, as before). noexcept, heap-free, lock-free.
#pragma once

#include <cstdint>

namespace cumemtrace::preload {

// Lends `n` (code, line) pairs (innermost first, as capture_python_stack writes them; at most
// wire::kMaxPythonFrames); n = 0 takes the frames back. Writers (Python calls) may race each
// other: they take turns.
void lend_backward_caller(const uint64_t* pairs, unsigned n) noexcept;

// Copies the lent pairs into out[0 .. 2*max) and returns how many; 0 when none are lent or a
// lender was writing.
unsigned backward_caller_frames(uint64_t* out, unsigned max) noexcept;

}  // namespace cumemtrace::preload
