// PyTorch's caching-allocator events in the ring, without a change to the user's script.
//
// The Python side (preload/python/cumemtrace_torch.py, loaded by our sitecustomize) finds, after
// CUDA's lazy initialisation and with every check done in Python, the live allocator object and
// the address of NativeCachingAllocator::attachAllocatorTraceTracker (a LOCAL symbol of
// libc10_cuda.so's .symtab, confirmed as a slot of the object's own vtable), and calls
// cumemtrace_torch_attach through ctypes. We build the std::function PyTorch expects
// (std::function<void(const TraceEntry&)>; libstdc++'s layout of it is part of the C++ ABI), and
// call the method the way a virtual call would: `this` first, the by-value std::function as a
// pointer to a temporary the caller owns (Itanium C++ ABI, non-trivial class argument).
//
// The tracker runs on PyTorch's allocating or freeing thread WITH its per-device allocator mutex
// held: it reads the entry's scalar fields at the offsets of the layout the Python side named
// (torch_layouts.h, generated from the wheels of torch 2.4 on by scripts/torch_layouts.py; the
// row chosen there by the torch version and checked against its installed header), and records one
// kTorchBlock through the ordinary recorder (lock-free ring, the caller's native + Python stack, no
// heap, never the GIL; a FREE_COMPLETED without a stack, which the collector takes from its
// FREE_REQUESTED).
//
// This file alone is compiled with -fexceptions: the call into PyTorch could throw (bad_alloc
// while it copies the std::function), and nothing may escape into Python's ctypes frame.
#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>

#include "core/config.h"
#include "core/export.h"
#include "hooks/torch_layouts.h"
#include "record/recorder.h"
#include "stacks/autograd_node.h"
#include "stacks/backward_caller.h"
#include "stacks/cfi_unwinder.h"
#include "stacks/python_stack.h"
#include "stacks/stack_capture.h"
#include "stacks/torch_pool.h"
#include "wire/wire_format.h"

namespace cumemtrace::preload {
#ifdef CUMEMTRACE_BENCH_SWITCHES
std::atomic<bool> g_torch_blocks_paused{false};  // hooks/bench_switches.cpp
#endif

namespace {

// PyTorch's TraceEntry, never defined here: only read at the offsets below.
struct TorchTraceEntry;
using TraceTracker = std::function<void(const TorchTraceEntry&)>;

constexpr int kLayoutCount = sizeof kTorchLayouts / sizeof kTorchLayouts[0];

std::atomic<int> g_layout{0};  // 1-based index into kTorchLayouts once attached; 0 before
std::atomic<bool> g_attach_tried{false};

template <typename T>
T field(const unsigned char* p, size_t offset) noexcept {
  T v;
  std::memcpy(&v, p + offset, sizeof v);
  return v;
}

void on_trace(const TorchTraceEntry& entry) noexcept {
#ifdef CUMEMTRACE_BENCH_SWITCHES
  if (g_torch_blocks_paused.load(std::memory_order_relaxed)) return;
#endif
  const int layout = g_layout.load(std::memory_order_acquire);
  if (layout <= 0) return;
  const TorchEntryLayout& l = kTorchLayouts[layout - 1];
  const auto* p = reinterpret_cast<const unsigned char*>(&entry);
  const auto action = field<int32_t>(p, l.action);
  const auto device = field<int8_t>(p, l.device);
  // SNAPSHOT entries are PyTorch's own markers of a memory_snapshot() call; anything out of range
  // means the layout is not what we were told: record nothing rather than nonsense.
  if (action < 0 || action > static_cast<int32_t>(wire::TorchAction::kOom) ||
      action == static_cast<int32_t>(wire::TorchAction::kSnapshot) || device < 0) {
    return;
  }
  ReentryGuard guard;
  if (!guard.outer || !tracing_possible()) return;
  EventArgs a{};
  a.walk_start = cfi::walk_start_here();  // the stack walk starts here (recorder.h)
  a.kind = wire::Kind::kTorchBlock;
  a.addr = field<uint64_t>(p, l.addr);
  a.size = field<uint64_t>(p, l.size);
  a.stream = field<uint64_t>(p, l.stream);
  a.device = device;
  a.aux = static_cast<uint64_t>(action);
  // PyTorch gives a completed free the context of its request (or, completed later by another
  // call, of the allocation); the collector does the same with the request's stack, so this
  // third of a training step's events is recorded without a walk.
  a.stack = action != static_cast<int32_t>(wire::TorchAction::kFreeCompleted);
  record(a);
}

// The size of the function symbol that starts at `function` in a loaded library's dynamic
// symbol table; 0 when no sized function symbol starts there.
uint64_t function_size(const void* function) noexcept {
  Dl_info info{};
  void* entry = nullptr;
  if (!function || !dladdr1(function, &info, &entry, RTLD_DL_SYMENT) || !entry) return 0;
  const auto* sym = static_cast<const ElfW(Sym)*>(entry);
  if (info.dli_saddr != function || ELF64_ST_TYPE(sym->st_info) != STT_FUNC) return 0;
  return sym->st_size;
}

}  // namespace
}  // namespace cumemtrace::preload

using cumemtrace::preload::function_size;
using cumemtrace::preload::g_attach_tried;
using cumemtrace::preload::g_layout;
using cumemtrace::preload::kLayoutCount;
using cumemtrace::preload::TraceTracker;

// Attaches our tracker to PyTorch's native caching allocator. `allocator` is the CUDAAllocator*
// held by c10::cuda::CUDACachingAllocator::allocator, `method` the address of its
// attachAllocatorTraceTracker override, `layout` the 1-based TraceEntry layout. Returns 0 when
// attached, -1 for an unknown layout or a null argument, -2 when called before (PyTorch has no
// detach: a second tracker would double every event), -3 when PyTorch threw.
CUMEMTRACE_EXPORT int cumemtrace_torch_attach(void* allocator, void* method, int layout) noexcept {
  if (!allocator || !method || layout < 1 || layout > kLayoutCount) return -1;
  if (g_attach_tried.exchange(true)) return -2;
  g_layout.store(layout, std::memory_order_release);
  using AttachFn = void (*)(void* self, TraceTracker* tracker);
  try {
    TraceTracker tracker(&cumemtrace::preload::on_trace);
    reinterpret_cast<AttachFn>(method)(allocator, &tracker);
  } catch (...) {
    g_layout.store(0, std::memory_order_release);
    return -3;
  }
  return 0;
}

// Ends every stack walk with the frame of the function that starts at `function`, a function
// symbol of a loaded library's dynamic symbol table: PyTorch's autograd Engine::evaluate_function,
// found by the Python side (cfi_unwinder.h: set_stop_function). Returns 0 when set, -1 when
// `function` is not the start of a function symbol with a size.
CUMEMTRACE_EXPORT int cumemtrace_torch_stop_walks_in(const void* function) noexcept {
  const uint64_t size = function_size(function);
  if (size == 0) return -1;
  const auto lo = reinterpret_cast<uint64_t>(function);
  cumemtrace::preload::cfi::set_stop_function(lo, lo + size);
  return 0;
}

// PyTorch runs backend:cudaMallocAsync, whose allocator lives in the module that holds `addr`
// (libc10_cuda.so): a stream-ordered pool allocation with Python frames then ends its native walk
// at that allocator's frame, so a tensor has the stack a block event has under the native
// allocator, its Python frames, plus the path from the allocator into the driver
// (core/config.h: Config::torch_native_stacks). Returns 0 when set, -1 when no loaded module holds
// `addr`, -2 when set before.
CUMEMTRACE_EXPORT int cumemtrace_torch_pool_allocator_in(const void* addr) noexcept {
  cumemtrace::preload::cfi::CodeRange text;
  if (!addr || !cumemtrace::preload::module_text(addr, text)) return -1;
  return cumemtrace::preload::set_torch_pool_allocator(text) ? 0 : -2;
}

// The engine thread's allocations are told by the autograd node it evaluates
// (autograd_node.h): `get_current_node` is torch::autograd::get_current_node in the loaded
// libtorch_cpu.so, `apply_slot` Node::apply's index among a node vtable's function pointers (both
// found and checked by the Python side against a generated node's vtable). Returns 0 when set, -1
// when `get_current_node` is not the start of a function symbol with a size or the slot is out of
// range, -2 when set before.
CUMEMTRACE_EXPORT int cumemtrace_torch_autograd_nodes(const void* get_current_node,
                                                      int apply_slot) noexcept {
  if (apply_slot < 0 || apply_slot >= 512 || function_size(get_current_node) == 0) return -1;
  return cumemtrace::preload::set_autograd_node_source(get_current_node,
                                                       static_cast<unsigned>(apply_slot))
             ? 0
             : -2;
}

// The calling thread starts a backward pass (cumemtrace_phases.py, GIL held, once per outermost
// backward): its Python frames, less the `skip` innermost (the Python side's own), are lent to
// autograd's engine threads until it calls again with skip < 0 (backward_caller.h). Returns the
// number of frames lent (0 for a take-back), -1 when not tracing or Python stacks are off.
CUMEMTRACE_EXPORT int cumemtrace_torch_backward_caller(int skip) noexcept {
  namespace pl = cumemtrace::preload;
  namespace wire = cumemtrace::wire;
  if (skip < 0) {
    pl::lend_backward_caller(nullptr, 0);
    return 0;
  }
  pl::ReentryGuard guard;
  if (!guard.outer || !pl::tracing_possible() || !pl::ensure_session() ||
      !pl::config().python_stacks) {
    return -1;
  }
  uint64_t pairs[2 * (wire::kMaxPythonFrames + 8)];
  uint64_t loop_at = 0;
  const unsigned max = wire::kMaxPythonFrames + 8;
  const unsigned n = pl::capture_python_stack(pairs, max, &loop_at);
  const unsigned s = std::min(static_cast<unsigned>(skip), n);
  pl::lend_backward_caller(pairs + 2 * s, n - s);
  return static_cast<int>(n - s);
}

// Records what the capture found (lines of key=value) for the snapshot's tool section.
CUMEMTRACE_EXPORT void cumemtrace_torch_info(const char* text) noexcept {
  cumemtrace::preload::ReentryGuard guard;
  if (!guard.outer || !text || !cumemtrace::preload::tracing_possible()) return;
  cumemtrace::preload::record_string(cumemtrace::wire::Kind::kTorchInfo, 0, text);
}

// What the model and optimizer own (the automatic phases' ownership walk, called through ctypes
// with the GIL held): `npairs` (data pointer, bytes) pairs of tensors of one role (1 parameter, 2
// gradient, 3 optimizer state). They go out as kTorchOwners records of at most kMaxExtraSlots
// slots of pairs each, the first marked kOwnersFirst (the walk replaces the role's previous one;
// an empty walk says the role owns nothing now). Returns 0 when recorded, -1 when not tracing,
// for bad arguments, or when a record was dropped (the walk is then incomplete).
CUMEMTRACE_EXPORT int cumemtrace_torch_owners(int role, const uint64_t* pairs,
                                              uint64_t npairs) noexcept {
  namespace wire = cumemtrace::wire;
  constexpr uint64_t kPairBytes = 2 * sizeof(uint64_t);
  constexpr uint64_t kPairsPerRecord = wire::kMaxExtraSlots * wire::kPayloadBytes / kPairBytes;
  static_assert(wire::kMaxExtraSlots * wire::kPayloadBytes % kPairBytes == 0,
                "a record's slots hold whole pairs");
  if (role < static_cast<int>(wire::OwnerRole::kParameter) ||
      role > static_cast<int>(wire::OwnerRole::kKvCache) || (npairs && !pairs) ||
      npairs > UINT64_MAX / kPairBytes) {
    return -1;
  }
  cumemtrace::preload::ReentryGuard guard;
  if (!guard.outer || !cumemtrace::preload::tracing_possible()) return -1;
  uint64_t done = 0;
  do {
    const uint64_t n = std::min(npairs - done, kPairsPerRecord);
    const uint64_t aux = static_cast<uint64_t>(role) | (done == 0 ? wire::kOwnersFirst : 0);
    if (!cumemtrace::preload::record_bytes(wire::Kind::kTorchOwners, aux,
                                           reinterpret_cast<const char*>(pairs + 2 * done),
                                           n * kPairBytes)) {
      return -1;
    }
    done += n;
  } while (done < npairs);
  return 0;
}

// torch.nn.Module._wrapped_call_impl's code object (id(Module._wrapped_call_impl.__code__), kept
// alive by the class): from now on Python frames of it carry the module object they call
// (python_stack.h: set_module_code), which the names below make a module's name. Returns 0 when
// set, -1 for null, -2 when set before.
CUMEMTRACE_EXPORT int cumemtrace_torch_module_code(const void* code) noexcept {
  if (!code) return -1;
  return cumemtrace::preload::set_module_code(reinterpret_cast<uint64_t>(code)) ? 0 : -2;
}

// Names the Python side gives (cumemtrace_modules.py, GIL held, never from an allocation hook):
// `what` 0 = the module table (module object address -> fully qualified name), 1..3 = the tensors
// of an ownership role (data pointer -> the name of their parameter); `text`: `len` bytes of whole
// lines "<hex address> <name>\n", at most one record's worth; `first`: the record starts that
// table (replacing its previous one). Returns 0 when recorded, -1 otherwise.
CUMEMTRACE_EXPORT int cumemtrace_torch_names(int what, int first, const char* text,
                                             uint64_t len) noexcept {
  namespace wire = cumemtrace::wire;
  if (what < 0 || what > static_cast<int>(wire::OwnerRole::kOptimizerState) || (len && !text) ||
      len > wire::kMaxExtraSlots * wire::kPayloadBytes) {
    return -1;
  }
  cumemtrace::preload::ReentryGuard guard;
  if (!guard.outer || !cumemtrace::preload::tracing_possible()) return -1;
  const uint64_t aux = static_cast<uint64_t>(what) | (first ? wire::kOwnersFirst : 0);
  return cumemtrace::preload::record_bytes(wire::Kind::kTorchNames, aux, text, len) ? 0 : -1;
}
