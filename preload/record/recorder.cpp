#include "record/recorder.h"

#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "core/config.h"
#include "core/event_clock.h"
#include "core/log.h"
#include "driver/real_driver.h"
#include "record/recording_meter.h"
#include "stacks/autograd_node.h"
#include "stacks/backward_caller.h"
#include "stacks/module_map.h"
#include "stacks/python_stack.h"
#include "stacks/stack_capture.h"
#include "stacks/torch_pool.h"

namespace cumemtrace::preload {

constinit thread_local int t_hook_depth __attribute__((tls_model("initial-exec"))) = 0;

std::atomic<uint64_t> g_devices_announced{0};
std::atomic<uint64_t> g_plain_kinds{0};

namespace {

__attribute__((noinline)) void announce_new_device(int device, uint32_t tid) noexcept {
  const uint64_t bit = uint64_t{1} << device;
  if (g_devices_announced.fetch_or(bit, std::memory_order_relaxed) & bit) return;
  char bus[32] = {};
  if (device_pci_bus_id(device, bus, sizeof bus - 1)) {
    emit_bytes(wire::Kind::kDevice, static_cast<uint64_t>(device), bus, strnlen(bus, sizeof bus),
               tid);
  }
}

// Once per ordinal, with the event that first names it: by then the driver is initialized.
inline void announce_device(int device, uint32_t tid) noexcept {
  if (device < 0 || device >= 64) return;
  if (g_devices_announced.load(std::memory_order_relaxed) & (uint64_t{1} << device)) return;
  announce_new_device(device, tid);
}

}  // namespace

void forget_devices() noexcept {
  g_devices_announced.store(0, std::memory_order_relaxed);
}

namespace {

// Records that give memory back (or undo a record that did): stackless unless free stacks are on.
inline bool releases_memory(const EventArgs& a) noexcept {
  switch (a.kind) {
    case wire::Kind::kFree:
    case wire::Kind::kFreeFailed:
    case wire::Kind::kRelease:
    case wire::Kind::kUnmap:
    case wire::Kind::kAddressFree:
    case wire::Kind::kHostFree:
    case wire::Kind::kUnmapImported:
    case wire::Kind::kGraphFreeNode:
      return true;
    case wire::Kind::kTorchBlock:
      switch (static_cast<wire::TorchAction>(a.aux)) {
        case wire::TorchAction::kFreeRequested:
        case wire::TorchAction::kFreeCompleted:
        case wire::TorchAction::kSegmentFree:
        case wire::TorchAction::kSegmentUnmap:
          return true;
        default:
          return false;
      }
    default:
      return false;
  }
}

// The OOM snapshot is written before the program goes on (and maybe exits). A new context is
// measured by the collector (NVML) before the thread that made it allocates anything, and the
// driver's figure after a context's end is read before the program goes on (or exits).
inline bool waits_for_collector(const EventArgs& a) noexcept {
  const bool oom =
      a.kind == wire::Kind::kOom || (a.kind == wire::Kind::kTorchBlock &&
                                     a.aux == static_cast<uint64_t>(wire::TorchAction::kOom));
  return oom || a.kind == wire::Kind::kContextCreated || a.kind == wire::Kind::kContextDestroyed;
}

// What an event holds and how it is written. The clock is the event's (EventArgs::time) or read
// when the record is written.
struct RecordPolicy {
  bool stack;    // its native and Python frames (record_with_stack)
  bool waits;    // returns once the collector consumed it (at most 5 s)
  bool metered;  // CUMEMTRACE_DEBUG: its time is added to the meter (recording_meter.h)
};

// The one decision of what an event holds, from the configuration and the event. The meter leaves
// out the records that wait for the collector (their wait is not recording) and the last one.
// A pool sample (pool_sampler.h) is the tool's reading, not the program's act: no reader wants
// its frames, and its walk, made whenever the interval falls due, would be the one that marks
// an engine thread when it falls inside a node (native_frames), changing the node's own stack.
inline RecordPolicy policy_of(const EventArgs& a) noexcept {
  const Config& c = config();
  const bool waits = waits_for_collector(a);
  return {a.stack && c.stack_depth && a.kind != wire::Kind::kExit &&
              a.kind != wire::Kind::kPoolUsage && (c.free_stacks || !releases_memory(a)),
          waits, __builtin_expect(c.debug, false) && !waits && a.kind != wire::Kind::kExit};
}

// Writes the event, then `n` native frames and `npy` Python (code, line) pairs from `frames`, and
// waits for the collector when the policy says so. The thread's and the device's first records
// announce them first.
__attribute__((always_inline)) inline void write(const EventArgs& a, RecordPolicy p,
                                                 const uint64_t* frames, unsigned n,
                                                 unsigned npy) noexcept {
  const uint32_t tid = current_tid();
  announce_device(a.device, tid);
  uint64_t ticket = 0;
  const bool ok = emit(a, tid, a.time, frames,
                       (n + 2 * npy) * static_cast<uint32_t>(sizeof(uint64_t)), n, npy, &ticket);
  // 5 s: the collector may be loading NVML (first use) when the first context appears.
  if (ok && p.waits) ring().wait_consumed(ticket, 5'000'000'000ull);
}

// An allocation from a stream-ordered pool (cudaMallocAsync and its kin).
inline bool stream_ordered(wire::Api api) noexcept {
  return api == wire::Api::kMemAllocAsync || api == wire::Api::kMemAllocFromPoolAsync;
}

// How many of a walk's `n` frames remain when it ends at the first frame in `code`, as a walk
// with that stop does; all of them if none is.
unsigned frames_through(const uint64_t* frames, unsigned n, const cfi::CodeRange* code) noexcept {
  for (unsigned i = 0; code && i < n; ++i) {
    if (code->holds_return(frames[i])) return i + 1;
  }
  return n;
}

// The native part of a stack event's frames, into `frames`: how many, and in *node the autograd
// node's frame that stands for Python frames (0: none; it is the last of them). `npy` Python
// frames were read; `loop_at`: where their evaluation loop's frame is (the walk may end there).
// With a node, *module_out gets the line word of the module whose forward created it (0: none).
__attribute__((always_inline)) inline unsigned native_frames(const EventArgs& a, uint64_t* frames,
                                                             unsigned npy, uint64_t loop_at,
                                                             const cfi::WalkStart* start,
                                                             cfi::FirstSeen* first_seen,
                                                             uint64_t* node_out,
                                                             uint64_t* module_out) noexcept {
  // With Python frames, the native walk ends at the innermost evaluation loop: above it is the
  // interpreter running those frames, about half of a PyTorch op's stack from Python.
  if (config().native_above_python) loop_at = 0;
  const bool whole_walks = config().torch_native_stacks;
  // A tensor of PyTorch's backend:cudaMallocAsync (a stream-ordered pool allocation) from there.
  const cfi::CodeRange* const pool =
      a.kind == wire::Kind::kAlloc && stream_ordered(a.api) && !whole_walks ? torch_pool_allocator()
                                                                            : nullptr;
  // On autograd's engine thread, which runs no Python, the node it evaluates stands for Python
  // frames (autograd_node.h): one frame, in place of a walk through the op and the dispatcher.
  const bool node_stands = npy == 0 && !whole_walks && (a.kind == wire::Kind::kTorchBlock || pool);
  uint64_t module = 0;
  uint64_t node = node_stands ? autograd_node_frame(&module) : 0;
  // A PyTorch block event with Python frames (or a node) has those alone unless native ones are
  // asked for (session.h: Config::torch_native_stacks).
  const bool native = (npy == 0 && !node) || a.kind != wire::Kind::kTorchBlock || whole_walks;
  // So does a pool tensor, but for the frames from the hook up to PyTorch's allocator, whose
  // frame ends the walk: they say that PyTorch asked, which the op dispatcher's frames above add
  // nothing to.
  const cfi::CodeRange* stop_in = npy || node ? pool : nullptr;
  unsigned n =
      native ? capture_stack(frames, config().stack_depth, first_seen, loop_at, start, stop_in) : 0;
  if (!node && npy == 0 && n && cfi::in_stop_function(frames[n - 1])) {
    // The walk ended in Engine::evaluate_function: this thread evaluates autograd nodes, from
    // this event on, which gets the stack the next ones will.
    note_engine_thread();
    node = node_stands ? autograd_node_frame(&module) : 0;
    if (node) n = a.kind == wire::Kind::kTorchBlock ? 0 : frames_through(frames, n, pool);
  }
  // A pool allocation that PyTorch's allocator did not make (a C++ extension's own cudaMallocAsync
  // in a backward op) walked past it: its own frames say who asked, and no node is put after them.
  if (node && pool && !(n && pool->holds_return(frames[n - 1]))) node = 0;
  if (node && n < config().stack_depth) frames[n++] = node;
  *node_out = node;
  *module_out = node ? module : 0;
  return n;
}

// Only frames the unwinder met for the first time can be in a module loaded since the map was
// sent: checking every frame cost 360 ns of a 23-frame PyTorch block event on the GPU host. A
// node's frame was never walked: its module (a C++ extension's node) may be new too.
inline void note_new_modules(const uint64_t* frames, unsigned n, const cfi::FirstSeen& first_seen,
                             uint64_t node) noexcept {
  if (first_seen.all) {
    modules_note_frames(frames, n);
  } else if (first_seen.n) {
    modules_note_frames(first_seen.pcs, first_seen.n);
  }
  if (node) modules_note_frames(&node, 1);
}

// The times between a stack event's phases, read only when metered (recording_meter.h).
template <bool kTimed>
struct Laps {
  uint64_t at[5] = {};
  void lap(int i) noexcept {
    if constexpr (kTimed) at[i] = meter_time();
  }
};

// An event with its stack: Python frames, then the native walk, the module notes, the record.
// Metered (kTimed), *phases gets the time of each.
template <bool kTimed>
__attribute__((noinline)) void record_with_stack(const EventArgs& a, RecordPolicy p,
                                                 const cfi::WalkStart* start,
                                                 StackPhases* phases = nullptr) noexcept {
  Laps<kTimed> laps;
  uint64_t py_memo_before = 0, py_watched_before = 0;
  if constexpr (kTimed) {
    py_memo_before = python_memo_hits();
    py_watched_before = python_watched_hits();
  }
  laps.lap(0);
  // Native return addresses, then (code, line) pairs of Python frames. The Python frames are
  // read first, into the tail, and moved down behind the native ones.
  uint64_t frames[wire::kMaxStackDepth + 2 * wire::kMaxPythonFrames];
  uint64_t* const py = frames + wire::kMaxStackDepth;
  uint64_t loop_at = 0;
  unsigned npy =
      config().python_stacks ? capture_python_stack(py, wire::kMaxPythonFrames, &loop_at) : 0;
  [[maybe_unused]] const unsigned own_npy = npy;
  laps.lap(1);
  cfi::FirstSeen first_seen;
  cfi::CacheStats walk_before{};
  if constexpr (kTimed) walk_before = cfi::thread_cache_stats();
  uint64_t node = 0, module = 0;
  const unsigned n = native_frames(a, frames, npy, loop_at, start, &first_seen, &node, &module);
  // Autograd's engine thread runs no Python: the frames of the thread that started the backward
  // pass stand behind its node (backward_caller.h), so the site is that backward() line; before
  // them, the module call whose forward created the node (node_modules.h), as a frame of
  // _wrapped_call_impl naming that module, which every view's module rule reads.
  if (npy == 0 && config().python_stacks && on_engine_thread()) {
    const uint64_t code = module ? module_code() : 0;
    if (code) {
      py[0] = code;
      py[1] = module;
    }
    const unsigned own = code ? 1 : 0;
    npy = own + backward_caller_frames(py + 2 * own, wire::kMaxPythonFrames - own);
  }
  cfi::CacheStats walk_after{};
  if constexpr (kTimed) walk_after = cfi::thread_cache_stats();
  if (npy) std::memmove(frames + n, py, 2 * npy * sizeof(uint64_t));
  laps.lap(2);
  note_new_modules(frames, n, first_seen, node);
  laps.lap(3);
  write(a, p, frames, n, npy);
  laps.lap(4);
  if constexpr (kTimed) {
    *phases = StackPhases{{laps.at[2] - laps.at[1], laps.at[3] - laps.at[2],
                           laps.at[1] - laps.at[0], laps.at[4] - laps.at[3]},
                          n,
                          node ? 1u : 0u,
                          own_npy,
                          static_cast<unsigned>(walk_after.replayed - walk_before.replayed),
                          static_cast<unsigned>(walk_after.memo_hits - walk_before.memo_hits),
                          static_cast<unsigned>(python_memo_hits() - py_memo_before),
                          static_cast<unsigned>(python_watched_hits() - py_watched_before)};
  }
}

// CUMEMTRACE_DEBUG: the event recorded as policy says, timed (recording_meter.h).
__attribute__((noinline)) void record_metered(const EventArgs& a, RecordPolicy p,
                                              const cfi::WalkStart* walk_start) noexcept {
  const MeterClass cls =
      a.kind == wire::Kind::kTorchBlock ? MeterClass::kTorchBlock : MeterClass::kDriver;
  const uint64_t start = meter_time();
  if (p.stack) {
    StackPhases phases{};
    record_with_stack<true>(a, p, walk_start, &phases);
    const uint64_t took = meter_time() - start;
    // A block event walked without Python frames (autograd's engine thread) is counted apart:
    // its whole native walk is what it costs.
    const bool native_only = cls == MeterClass::kTorchBlock && phases.python_frames == 0;
    meter_add(native_only ? MeterClass::kTorchBlockNoPython : cls, took, &phases);
  } else {
    write(a, p, nullptr, 0, 0);
    meter_add(cls, meter_time() - start, nullptr);
  }
}

}  // namespace

void set_plain_kinds() noexcept {
  uint64_t kinds = 0;
  for (unsigned k = 1; k < 64; ++k) {
    const EventArgs a{static_cast<wire::Kind>(k)};
    if (a.kind == wire::Kind::kTorchBlock || a.kind == wire::Kind::kExit) continue;
    const RecordPolicy p = policy_of(a);
    if (!p.stack && !p.waits && !p.metered) kinds |= uint64_t{1} << k;
  }
  g_plain_kinds.store(kinds, std::memory_order_relaxed);
}

void record(const EventArgs& a) noexcept {
  if (!ensure_session()) return;
  const RecordPolicy p = policy_of(a);
  if (!p.stack && !p.metered) {
    write(a, p, nullptr, 0, 0);  // a tail call: nothing of this frame is needed
    return;
  }
  // The walk starts at the hook's frame, or at this one: never at the recorder's frames below.
  // Passed by address, so this frame stays until the walk is done (no tail call).
  const cfi::WalkStart start = a.walk_start.pc ? a.walk_start : cfi::walk_start_here();
  if (p.metered) {
    record_metered(a, p, &start);
    return;
  }
  record_with_stack<false>(a, p, &start);
}

}  // namespace cumemtrace::preload
