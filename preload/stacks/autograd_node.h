// Contract: the autograd node that PyTorch's engine thread is evaluating, as the one frame that
// stands for it in a stack: the entry of that node's apply() (say
// torch::autograd::generated::MmBackward0::apply), which the collector symbolizes as any frame.
// The Python side (cumemtrace_torch.py) finds torch::autograd::get_current_node() and the vtable
// slot of Node::apply in the loaded libtorch_cpu.so and names them once through
// cumemtrace_torch_autograd_nodes() (torch_tracker.cpp).
//
// Why: the engine thread runs no Python, so its allocations had only their native walk up to
// Engine::evaluate_function for a site: 20 to 25 frames of allocator, dispatcher and op, about
// 1 µs a walk between two allocations of a training step (docs/performance.md). The node says
// which backward op asked, in one call and three loads (about 30 ns), as a Python thread's
// tensors are told by their Python frames.
//
// Only on threads that note_engine_thread() marked: a walk there ended in evaluate_function, so
// libtorch_cpu's thread-locals exist on that thread and get_current_node() cannot allocate them
// inside a hook. Every function here is noexcept, heap-free and lock-free.
#pragma once

#include <cstdint>

namespace cumemtrace::preload {

// Records where to read the current node: `get_current_node` (the address of
// torch::autograd::get_current_node, which returns a std::shared_ptr<Node>) and `apply_slot`
// (Node::apply's index among the vtable's function pointers). False when set before.
bool set_autograd_node_source(const void* get_current_node, unsigned apply_slot) noexcept;

// The calling thread evaluates autograd nodes (its walk ended in Engine::evaluate_function).
void note_engine_thread() noexcept;

// Whether note_engine_thread() marked the calling thread.
bool on_engine_thread() noexcept;

// The frame that stands for the node the calling thread is evaluating: its apply()'s entry + 1
// (a return address, as the collector reads every frame), or 0: not a marked engine thread, no
// source named, or no node being evaluated right now. With `module_word`, also the line word of
// the module whose forward created that node (node_modules.h; 0 when unknown).
uint64_t autograd_node_frame(uint64_t* module_word = nullptr) noexcept;

}  // namespace cumemtrace::preload
