// Contract: what the recorder knows of PyTorch's backend:cudaMallocAsync. There a tensor is one
// stream-ordered pool allocation made by PyTorch's allocator (libc10_cuda.so); the Python side
// (cumemtrace_torch.py) names that module once, through cumemtrace_torch_pool_allocator_in()
// (torch_tracker.cpp). Read on every pool allocation with Python frames: lock-free; set once,
// later calls change nothing.
#pragma once

#include "stacks/cfi_unwinder.h"

namespace cumemtrace::preload {

// Records `text` as the allocator's code. False when one was set before.
bool set_torch_pool_allocator(const cfi::CodeRange& text) noexcept;

// The allocator's code, or null when no such backend was announced.
const cfi::CodeRange* torch_pool_allocator() noexcept;

}  // namespace cumemtrace::preload
