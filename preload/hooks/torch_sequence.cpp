// PyTorch's autograd node numbering, interposed: each node's creation files the module call it was
// made in (stacks/node_modules.h), so that its backward's allocations are on that module.
//
// torch::autograd::Node's constructor (an inline of torch/csrc/autograd/function.h compiled into
// libtorch_cpu.so and the other torch libraries) takes its number from
// at::sequence_number::get_and_increment(), a default-visibility function of libtorch_cpu.so that
// those libraries call through their PLT (checked on torch 2.11: R_X86_64_JUMP_SLOT relocations),
// so the preloaded definition below is the one they reach. It returns what the real one returns,
// always: the real one is found once, in the loaded libtorch_cpu.so (else with dlsym(RTLD_NEXT));
// where none is found (not expected: only torch calls this name) it counts on its own thread-local,
// the same numbers torch's would give a fresh thread, and says so in one line. Filing costs one
// walk up the calling thread's Python frames to its innermost module call (a few frames), off until
// the Python side has checked torch's node layout (cumemtrace_torch_node_layout).
#include <dlfcn.h>

#include <atomic>
#include <cstdint>

#include "core/config.h"
#include "core/export.h"
#include "core/log.h"
#include "driver/real_driver.h"
#include "record/recorder.h"
#include "stacks/node_modules.h"

namespace cumemtrace::preload {
#ifdef CUMEMTRACE_BENCH_SWITCHES
std::atomic<bool> g_node_modules_paused{false};  // hooks/bench_switches.cpp
#endif
}  // namespace cumemtrace::preload

namespace {

namespace pl = cumemtrace::preload;

constexpr const char* kGetAndIncrement = "_ZN2at15sequence_number17get_and_incrementEv";
using CounterFn = uint64_t (*)();

std::atomic<CounterFn> g_real{nullptr};
std::atomic<bool> g_missing{false};
thread_local constinit uint64_t t_own_counter __attribute__((tls_model("initial-exec"))) = 0;

uint64_t own_counter() {
  return t_own_counter++;
}

CounterFn real_counter() noexcept {
  CounterFn f = g_real.load(std::memory_order_acquire);
  if (f) return f;
  const pl::DlsymFn dlsym_fn = pl::real_dlsym();
  // Python loads torch's libraries RTLD_LOCAL: they are not after ours in the global scope, so
  // libtorch_cpu.so (loaded already: its code is calling) is asked by name first.
  if (void* torch_cpu = dlsym_fn ? dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD) : nullptr) {
    f = reinterpret_cast<CounterFn>(dlsym_fn(torch_cpu, kGetAndIncrement));
    dlclose(torch_cpu);
  }
  if (!f && dlsym_fn) f = reinterpret_cast<CounterFn>(dlsym_fn(RTLD_NEXT, kGetAndIncrement));
  if (!f) {
    f = own_counter;
    if (!g_missing.exchange(true, std::memory_order_relaxed)) {
      pl::print_line("no at::sequence_number::get_and_increment after the preload; ",
                     "autograd nodes are numbered by cumemtrace");
    }
  }
  g_real.store(f, std::memory_order_release);
  return f;
}

}  // namespace

// at::sequence_number::get_and_increment(): the calling thread's next autograd node number.
CUMEMTRACE_EXPORT uint64_t _ZN2at15sequence_number17get_and_incrementEv() noexcept {
  const uint64_t seq = real_counter()();
#ifdef CUMEMTRACE_BENCH_SWITCHES
  if (pl::g_node_modules_paused.load(std::memory_order_relaxed)) return seq;
#endif
  if (pl::node_modules_on()) {
    pl::ReentryGuard guard;
    if (guard.outer && pl::tracing_possible() && pl::config().python_stacks) {
      pl::note_node_created(seq);
    }
  }
  return seq;
}

// Where torch's Node keeps its sequence number and its creating thread's id (byte offsets, checked
// by the Python side against live nodes: cumemtrace_torch.py), and the address of
// at::RecordFunction::currentThreadId in the loaded libtorch_cpu.so. Returns 0 when set, -1 for
// bad arguments, -2 when set before. (-1, -1, null) turns filing off for good (the Python side's
// check of the whole route failed) and returns 0.
CUMEMTRACE_EXPORT int cumemtrace_torch_node_layout(int sequence_offset, int thread_offset,
                                                   const void* current_thread_id) noexcept {
  if (sequence_offset == -1 && thread_offset == -1 && !current_thread_id) {
    pl::clear_node_layout();
    return 0;
  }
  if (sequence_offset < 0 || thread_offset < 0 || !current_thread_id) return -1;
  if (pl::node_modules_on()) return -2;
  return pl::set_node_layout(static_cast<unsigned>(sequence_offset),
                             static_cast<unsigned>(thread_offset), current_thread_id)
             ? 0
             : -1;
}

// The line word filed for the node at `node` (a live torch::autograd::Node*, from a grad_fn the
// caller holds): how the Python side checks, once, that nodes made inside a module call are filed
// with that module (the interposition reached, the layout fits). 0 when none is.
CUMEMTRACE_EXPORT uint64_t cumemtrace_torch_node_module(const void* node) noexcept {
  return pl::node_module_word(node);
}
