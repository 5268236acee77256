#include "recorder.h"

#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "autograd_node.h"
#include "event_clock.h"
#include "module_map.h"
#include "python_stack.h"
#include "real_driver.h"
#include "recording_meter.h"
#include "session.h"
#include "stack_capture.h"
#include "torch_pool.h"

namespace cumemtrace::preload {

constinit thread_local int t_hook_depth __attribute__((tls_model("initial-exec"))) = 0;

constinit thread_local uint32_t t_tid __attribute__((tls_model("initial-exec"))) = 0;
std::atomic<uint64_t> g_devices_announced{0};
std::atomic<uint64_t> g_plain_kinds{0};

namespace {

bool publish_string(wire::Kind kind, uint64_t aux, const char* s, size_t len, uint32_t tid,
                    uint64_t* ticket = nullptr) noexcept {
  wire::EventPayload ev{};
  ev.time_ns = event_time();
  ev.kind = kind;
  ev.tid = tid;
  ev.device = -1;
  ev.aux = aux;
  ev.flags = wire::kFlagStringRecord;
  if (len > wire::kMaxExtraSlots * wire::kPayloadBytes) {
    len = wire::kMaxExtraSlots * wire::kPayloadBytes;
  }
  ev.size = len;
  return ring().publish(ev, s, static_cast<uint32_t>(len), ticket);
}

__attribute__((noinline)) uint32_t first_event_of_thread() noexcept {
  t_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  char name[17] = {};
  prctl(PR_GET_NAME, name, 0, 0, 0);
  publish_string(wire::Kind::kThreadName, 0, name, strnlen(name, sizeof name), t_tid);
  return t_tid;
}

// The kernel thread id, cached per thread (reset in a forked child by forget_thread_cache); a
// thread announces its name with its first event.
inline uint32_t current_tid() noexcept {
  const uint32_t tid = t_tid;
  return tid ? tid : first_event_of_thread();
}

__attribute__((noinline)) void announce_new_device(int device, uint32_t tid) noexcept {
  const uint64_t bit = uint64_t{1} << device;
  if (g_devices_announced.fetch_or(bit, std::memory_order_relaxed) & bit) return;
  char bus[32] = {};
  if (device_pci_bus_id(device, bus, sizeof bus - 1)) {
    publish_string(wire::Kind::kDevice, static_cast<uint64_t>(device), bus,
                   strnlen(bus, sizeof bus), tid);
  }
}

// Once per ordinal, with the event that first names it: by then the driver is initialized.
inline void announce_device(int device, uint32_t tid) noexcept {
  if (device < 0 || device >= 64) return;
  if (g_devices_announced.load(std::memory_order_relaxed) & (uint64_t{1} << device)) return;
  announce_new_device(device, tid);
}

}  // namespace

void forget_thread_cache() noexcept {
  t_tid = 0;
}

void forget_devices() noexcept {
  g_devices_announced.store(0, std::memory_order_relaxed);
}

namespace {

inline void write_event(wire::EventPayload& ev, const EventArgs& a, uint32_t tid, uint64_t time_ns,
                        unsigned nframes, unsigned npyframes) noexcept {
  write_payload(ev, a.kind, a.api, a.result, a.addr, a.size, a.stream, a.aux, a.device, a.flags,
                tid, time_ns, nframes, npyframes);
}

// The OOM snapshot is written before the program goes on (and maybe exits). A new context is
// measured by the collector (NVML) before the thread that made it allocates anything, and the
// driver's figure after a context's end is read before the program goes on (or exits).
bool waits_for_collector(const EventArgs& a) noexcept {
  const bool oom =
      a.kind == wire::Kind::kOom || (a.kind == wire::Kind::kTorchBlock &&
                                     a.aux == static_cast<uint64_t>(wire::TorchAction::kOom));
  return oom || a.kind == wire::Kind::kContextCreated || a.kind == wire::Kind::kContextDestroyed;
}

void after_publish(const EventArgs& a, bool published, uint64_t ticket) noexcept {
  // 5 s: the collector may be loading NVML (first use) when the first context appears.
  if (published && waits_for_collector(a)) ring().wait_consumed(ticket, 5'000'000'000ull);
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

// The times between a stack event's phases, read only when metered (recording_meter.h).
template <bool kTimed>
struct Laps {
  uint64_t at[5] = {};
  void lap(int i) noexcept {
    if constexpr (kTimed) at[i] = meter_time();
  }
};

// `time`: the event's time when the hook read it (record_at), else 0.
template <bool kTimed>
__attribute__((noinline)) void record_with_stack(const EventArgs& a, const cfi::WalkStart* start,
                                                 uint64_t time,
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
  const unsigned npy =
      config().python_stacks ? capture_python_stack(py, wire::kMaxPythonFrames, &loop_at) : 0;
  laps.lap(1);
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
  uint64_t node = node_stands ? autograd_node_frame() : 0;
  // A PyTorch block event with Python frames (or a node) has those alone unless native ones are
  // asked for (session.h: Config::torch_native_stacks).
  const bool native = (npy == 0 && !node) || a.kind != wire::Kind::kTorchBlock || whole_walks;
  // So does a pool tensor, but for the frames from the hook up to PyTorch's allocator, whose
  // frame ends the walk: they say that PyTorch asked, which the op dispatcher's frames above add
  // nothing to.
  const cfi::CodeRange* stop_in = npy || node ? pool : nullptr;
  cfi::FirstSeen first_seen;
  cfi::CacheStats walk_before{};
  if constexpr (kTimed) walk_before = cfi::thread_cache_stats();
  unsigned n =
      native ? capture_stack(frames, config().stack_depth, &first_seen, loop_at, start, stop_in)
             : 0;
  cfi::CacheStats walk_after{};
  if constexpr (kTimed) walk_after = cfi::thread_cache_stats();
  if (!node && npy == 0 && n && cfi::in_stop_function(frames[n - 1])) {
    // The walk ended in Engine::evaluate_function: this thread evaluates autograd nodes, from
    // this event on, which gets the stack the next ones will.
    note_engine_thread();
    node = node_stands ? autograd_node_frame() : 0;
    if (node) n = a.kind == wire::Kind::kTorchBlock ? 0 : frames_through(frames, n, pool);
  }
  // A pool allocation that PyTorch's allocator did not make (a C++ extension's own cudaMallocAsync
  // in a backward op) walked past it: its own frames say who asked, and no node is put after them.
  if (node && pool && !(n && pool->holds_return(frames[n - 1]))) node = 0;
  if (node && n < config().stack_depth) frames[n++] = node;
  if (npy) std::memmove(frames + n, py, 2 * npy * sizeof(uint64_t));
  laps.lap(2);
  // Only frames the unwinder met for the first time can be in a module loaded since the map was
  // sent: checking every frame cost 360 ns of a 23-frame PyTorch block event on the GPU host. A
  // node's frame was never walked: its module (a C++ extension's node) may be new too.
  if (first_seen.all) {
    modules_note_frames(frames, n);
  } else if (first_seen.n) {
    modules_note_frames(first_seen.pcs, first_seen.n);
  }
  if (node) modules_note_frames(&node, 1);
  laps.lap(3);
  const uint32_t tid = current_tid();
  announce_device(a.device, tid);
  wire::EventPayload ev;
  write_event(ev, a, tid, time ? time : event_time(), n, npy);
  uint64_t ticket = 0;
  const bool ok =
      ring().publish(ev, frames, (n + 2 * npy) * static_cast<uint32_t>(sizeof(uint64_t)), &ticket);
  laps.lap(4);
  if constexpr (kTimed) {
    *phases = StackPhases{{laps.at[2] - laps.at[1], laps.at[3] - laps.at[2],
                           laps.at[1] - laps.at[0], laps.at[4] - laps.at[3]},
                          n,
                          node ? 1u : 0u,
                          npy,
                          static_cast<unsigned>(walk_after.replayed - walk_before.replayed),
                          static_cast<unsigned>(walk_after.memo_hits - walk_before.memo_hits),
                          static_cast<unsigned>(python_memo_hits() - py_memo_before),
                          static_cast<unsigned>(python_watched_hits() - py_watched_before)};
  }
  after_publish(a, ok, ticket);
}

// An event without a stack on the general path (record_fields() takes the others straight from
// the hook): a thread's first record, a device's first event, the meter's, those that wait for
// the collector. One slot written in place (publish_plain) and no frame buffer.
inline void record_without_stack(const EventArgs& a, uint64_t time) noexcept {
  const uint32_t tid = current_tid();
  announce_device(a.device, tid);
  uint64_t ticket = 0;
  if (publish_plain(a.kind, a.api, a.result, a.addr, a.size, a.stream, a.aux, a.device, a.flags,
                    tid, time, ticket)) {
    after_publish(a, true, ticket);
  }
}

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

inline bool takes_stack(const EventArgs& a) noexcept {
  return a.stack && config().stack_depth && a.kind != wire::Kind::kExit &&
         (config().free_stacks || !releases_memory(a));
}

inline void record_now(const EventArgs& a, const cfi::WalkStart* start, uint64_t time) noexcept {
  if (takes_stack(a)) {
    record_with_stack<false>(a, start, time);
  } else {
    record_without_stack(a, time);
  }
}

// CUMEMTRACE_DEBUG: the same, timed (recording_meter.h).
__attribute__((noinline)) void record_metered(const EventArgs& a, const cfi::WalkStart* walk_start,
                                              uint64_t time) noexcept {
  if (waits_for_collector(a) || a.kind == wire::Kind::kExit) {
    record_now(a, walk_start, time);  // waits for the collector, or is the last record
    return;
  }
  const MeterClass cls =
      a.kind == wire::Kind::kTorchBlock ? MeterClass::kTorchBlock : MeterClass::kDriver;
  const uint64_t start = meter_time();
  if (takes_stack(a)) {
    StackPhases phases{};
    record_with_stack<true>(a, walk_start, time, &phases);
    const uint64_t took = meter_time() - start;
    // A block event walked without Python frames (autograd's engine thread) is counted apart:
    // its whole native walk is what it costs.
    const bool native_only = cls == MeterClass::kTorchBlock && phases.python_frames == 0;
    meter_add(native_only ? MeterClass::kTorchBlockNoPython : cls, took, &phases);
  } else {
    record_without_stack(a, time);
    meter_add(cls, meter_time() - start, nullptr);
  }
}

// record() and record_at(): `time` 0 reads the clock when the record is written.
__attribute__((always_inline)) inline void record_event(const EventArgs& a,
                                                        uint64_t time) noexcept {
  if (!ensure_session()) return;
  // A stack-less event goes straight on (a tail call: nothing of this frame is needed).
  const bool debug = __builtin_expect(config().debug, false);
  if (!debug && !takes_stack(a)) {
    record_without_stack(a, time);
    return;
  }
  // The walk starts at the hook's frame, or at this one: never at the recorder's frames below.
  // Passed by address, so this frame stays until the walk is done (no tail call).
  const cfi::WalkStart start = a.walk_start.pc ? a.walk_start : cfi::walk_start_here();
  if (debug) {
    record_metered(a, &start, time);
    return;
  }
  record_with_stack<false>(a, &start, time);
}

}  // namespace

void set_plain_kinds() noexcept {
  uint64_t kinds = 0;
  for (unsigned k = 1; k < 64 && !config().debug; ++k) {
    const EventArgs a{static_cast<wire::Kind>(k)};
    if (a.kind == wire::Kind::kTorchBlock || a.kind == wire::Kind::kExit) continue;
    if (!takes_stack(a) && !waits_for_collector(a)) kinds |= uint64_t{1} << k;
  }
  g_plain_kinds.store(kinds, std::memory_order_relaxed);
}

void record(const EventArgs& a) noexcept {
  record_event(a, 0);
}

void record_at(const EventArgs& a, uint64_t time) noexcept {
  record_event(a, time);
}

void record_fields_general(wire::Kind kind, wire::Api api, uint64_t addr, uint64_t size, int device,
                           uint64_t stream, uint8_t flags, uint64_t time) noexcept {
  EventArgs a{kind, api};
  a.addr = addr;
  a.size = size;
  a.device = device;
  a.stream = stream;
  a.flags = flags;
  record_event(a, time);
}

void record_string(wire::Kind kind, uint64_t aux, const char* s) noexcept {
  record_bytes(kind, aux, s, strnlen(s, wire::kMaxExtraSlots * wire::kPayloadBytes));
}

bool record_bytes(wire::Kind kind, uint64_t aux, const char* s, size_t len) noexcept {
  if (!ensure_session()) return false;
  return publish_string(kind, aux, s, len, current_tid());
}

void record_string_and_wait(wire::Kind kind, uint64_t aux, const char* s,
                            uint64_t timeout_ns) noexcept {
  if (!ensure_session()) return;
  const size_t len = strnlen(s, wire::kMaxExtraSlots * wire::kPayloadBytes);
  uint64_t ticket = 0;
  if (publish_string(kind, aux, s, len, current_tid(), &ticket)) {
    ring().wait_consumed(ticket, timeout_ns);
  }
}

}  // namespace cumemtrace::preload
