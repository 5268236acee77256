// Contract: what each byte of a PyTorch run is for (snap::Category), decided once here and read by
// every view (the collector writes it on each trace entry before every snapshot; the ledger,
// report, check and diff read the same decision). Only a snapshot with the automatic phases
// (phases.h) or ownership walks (snap::ToolSection::ownership) is labelled; otherwise every entry
// stays kNone. Per device trace:
//  - a tensor is one PyTorch block's life: its alloc, free_requested and free_completed entries
//    (same address), all three get the tensor's category. It is alive from its alloc until its
//    free_requested (the program let go of it; free_completed when that is missing); a tensor
//    without a free is alive to the end, one freed without an alloc in the trace was allocated
//    before it. Rules, first match wins:
//    1. parameter / gradient / optimizer_state / parameter_unsharded (FSDP2's all-gathered
//       parameters) / cublas_workspace (torch's cuBLAS workspaces: no tensor, kept from a
//       thread's first cuBLAS call) / communication (FSDP2's flat all-gather and reduce-scatter
//       buffers) / kv_cache (the cache a root's forward returned under no_grad): an ownership
//       walk made while the tensor was alive (alloc time <= walk time <= free time) has a data
//       pointer inside [addr, addr+size); the roles in that order when several match. (An input
//       walk, snap::OwnerRole::kInput, joins the same way but counts only in rule 5.)
//    1b. communication, with automatic phases: DDP's gradient buckets (the flat buffers its
//       all-reduce runs on; the gradients are copies of them unless gradient_as_bucket_view, whose
//       gradients, views into the buckets, rule 1 names first). DDP's C++ Reducer makes them where
//       no Python walk can reach them (no binding returns them), at construction and again when
//       it rebuilds them at the first forward: a tensor whose stack's innermost Python frame is
//       DistributedDataParallel._ddp_init_helper or ._pre_forward, or _DDPJoinHook.main_hook
//       (torch/nn/parallel/distributed.py) and that outlives its phase's stretch (the Reducer's map
//       of used parameters, a few bytes, is made there too and is the all-reduce's as well); also
//       such a bucket that rule 1 named gradient but that the latest gradient walk made while it
//       lived does not reach (gradient_as_bucket_view: the construction's bucket, which the first
//       step's gradients were views of, kept after the rebuild by NCCL's work).
//    2. allocated in forward or loss (phases.h: the entry's phase): freed within that span ->
//       temporary; else activation (what the forward left behind: saved tensors, its outputs,
//       a wrapper's fp32 copy of them, the loss).
//    3. allocated in backward (an autograd engine thread, or a backward interval): freed within
//       the same span -> temporary (activation checkpointing's recompute is this); alive when the
//       next optimizer step starts and at a data pointer (same address, no more bytes) of the
//       latest gradient walk made before it was allocated -> gradient (the walks are re-sent only
//       when the gradients' pointers moved: after zero_grad(set_to_none=True) each step's new
//       gradients mostly land where the last ones were); else autograd.
//    4. allocated in the optimizer step or zero_grad: freed within it (the optimizer's: within
//       its step, whose closure's forward and backward may cut it into several spans: LBFGS's
//       working tensors) -> temporary; else, made in the optimizer span's stretch before the
//       auto:optimizer interval (gradient clipping's total norm, GradScaler's found_inf: the
//       program's code between backward and the step) with input walks -> program; else
//       unknown.
//    5. allocated in setup or data (outside every phase): passed to a root module's forward (an
//       input walk saw it; or, alive when the next forward starts, no input walk sent in that
//       forward and the latest one before it has a data pointer inside it: the walk is re-sent
//       only when the inputs' pointers change, so each step's new batch, landing where the last
//       one was, has none of its own) -> input; freed within the same stretch -> temporary; else
//       program (the program's own: a tensor the user's code made and keeps). A snapshot without
//       input walks (an older preload) keeps the former rule: alive when the next forward starts ->
//       input.
//    Without automatic phases only rule 1 applies; the rest is unknown.
//  - held outside PyTorch's blocks (held_outside_blocks): at a training step's end (its auto:step
//    MARK) the gradients are the latest gradient walk's, the one made before the next phase after
//    the MARK begins (the walks are re-sent only when the pointers moved, so a step without a walk
//    kept the last one's). A walked gradient no live tensor holds at that moment lives where the
//    allocator keeps no block: with torch.compile(mode="reduce-overhead") (CUDA graph trees) a
//    graph replay rebuilds its outputs over its private pool's memory with no allocator call
//    (torch._C._construct_storage_from_data_pointer), so the gradients of every replayed step sit
//    in pool blocks the trace shows freed (memory_allocated() does not count them; reserved
//    does). Such a gradient inside one of PyTorch's segments of the device, after a CUDA graph's
//    private pool was used (the tool section's pytorch.private_pools, kind cuda_graph), is the
//    graph pool's; one inside a segment with no graph pool used, or in no PyTorch segment of any
//    device (listed on device 0), is listed as such (never counted silently as nothing): the
//    ledger says why. Blocks and segments the end state holds that no trace entry made (a capture
//    that attached late) count as there all along.
//  - PyTorch's segment events (segment_*: reserved memory, the cache, no tensor's) and its other
//    entries (oom, snapshot) -> unknown (memory_viz needs one "unknown" entry: snapshot.h).
//  - every driver-level (non-PyTorch) entry -> library.
// Cost: one pass per trace with a hash map of open tensors, a binary search per entry into the
// phases, and the walks joined by a time-ordered sweep over the live tensors (an ordered map):
// O(n log n) in the entries plus O(w log n) in the walks' pointers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pytorch/phases.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

struct TensorLife {
  uint64_t addr = 0;
  uint64_t size = 0;       // the alloc entry's block (held_bytes; the free's when allocated before)
  uint64_t requested = 0;  // the bytes the tensor asked for (the entry's `size`)
  int32_t stack = snap::kNoStack;
  std::ptrdiff_t alloc = -1;  // entry indices in the device trace; -1: none
  std::ptrdiff_t free_requested = -1;
  std::ptrdiff_t free_completed = -1;
  int64_t alloc_us = 0;  // INT64_MIN when allocated before the trace
  int64_t free_us = 0;   // INT64_MAX while alive at the end
  snap::Category category = snap::Category::kUnknown;
};

// A tensor's own bytes: its request rounded up to PyTorch's 512 B minimum block, as MemTracker
// counts a CUDA tensor and as named_parameters() adds up (numel * element_size, for the usual
// shapes). Its block (`size`) can be larger: a large block keeps an unsplit remainder under
// 1 MiB+ (a 4 MiB weight in a 5 MiB block), which memory_allocated() counts and the tensor does
// not. The ledger shows both per category; the view by module counts these (modules.h).
inline uint64_t tensor_bytes(const TensorLife& t) {
  return (t.requested + snap::kBlockUnit - 1) / snap::kBlockUnit * snap::kBlockUnit;
}

struct DeviceTensors {
  std::vector<TensorLife> lives;
  std::vector<int32_t> life_of;  // per trace entry: index into lives, -1 for other entries
};

// A walked tensor no live PyTorch block held at a step's end (contract: "held outside").
struct HeldTensor {
  uint64_t addr = 0;
  uint64_t bytes = 0;  // the walk's (numel x element size)
  snap::Category category = snap::Category::kGradient;
  bool in_segment = false;  // inside one of PyTorch's segments of the device
};

struct HeldAtStep {
  int step = -1;            // 0-based; -1: no complete step
  int64_t time_us = 0;      // the moment judged: the step's MARK, or its walk when later
  int64_t walk_us = 0;      // the gradient walk that listed them (its names table follows)
  bool graph_pool = false;  // a CUDA graph's private pool was used before that moment
  std::vector<HeldTensor> tensors;
  // Bytes (tensor_bytes' rounding to 512 B: as MemTracker and the ledger count a tensor) of the
  // tensors inside PyTorch's segments (`in_segment`) or outside them.
  uint64_t bytes(bool in_segment) const;
};

// The tensors held outside PyTorch's blocks at the end of training step `step` (0-based) on
// `device` (contract); empty (step -1) when the step is not a complete training step.
HeldAtStep held_outside_blocks(const snap::Snapshot& s, int device, const Phases& phases,
                               const DeviceTensors& dt, int step);

// The tensors of one device's trace and their categories (the rules above).
DeviceTensors device_tensors(const snap::Snapshot& s, int device, const Phases& phases);

// Sets TraceEntry::category on every entry of every device (the rules above), or leaves every
// entry kNone when the snapshot has neither automatic phases nor ownership walks.
void label_categories(snap::Snapshot& s);

// True when label_categories would label the snapshot.
bool labels_categories(const snap::Snapshot& s, const Phases& phases);

}  // namespace cumemtrace::analysis
