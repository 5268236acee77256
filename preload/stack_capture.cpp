#include "stack_capture.h"

#include <dlfcn.h>
#include <link.h>
#include <unwind.h>

#include <atomic>

namespace cumemtrace::preload {

namespace {

// The text range of libcumemtrace itself: frames inside it are ours, not the application's.
std::atomic<uint64_t> g_self_lo{0};
std::atomic<uint64_t> g_self_hi{0};

int find_self(dl_phdr_info* info, size_t, void* data) {
  if (info->dlpi_addr != reinterpret_cast<uintptr_t>(data)) return 0;
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    const uint64_t a = info->dlpi_addr + ph.p_vaddr;
    if (a < lo) lo = a;
    if (a + ph.p_memsz > hi) hi = a + ph.p_memsz;
  }
  g_self_lo.store(lo, std::memory_order_relaxed);
  g_self_hi.store(hi, std::memory_order_release);
  return 1;
}

void init_self_range() noexcept {
  Dl_info di;
  if (dladdr(reinterpret_cast<void*>(&capture_stack), &di) && di.dli_fbase) {
    dl_iterate_phdr(find_self, di.dli_fbase);
  }
  if (!g_self_hi.load(std::memory_order_acquire)) g_self_hi.store(1, std::memory_order_release);
}

struct Walk {
  uint64_t* out;
  unsigned max;
  unsigned n;
  uint64_t lo, hi;
  bool skipping;
};

_Unwind_Reason_Code on_frame(_Unwind_Context* ctx, void* arg) {
  auto* w = static_cast<Walk*>(arg);
  const uint64_t ip = _Unwind_GetIP(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  if (w->skipping) {
    if (ip >= w->lo && ip < w->hi) return _URC_NO_REASON;
    w->skipping = false;
  }
  w->out[w->n++] = ip;
  return w->n >= w->max ? _URC_END_OF_STACK : _URC_NO_REASON;
}

}  // namespace

unsigned capture_stack(uint64_t* out, unsigned max_depth) noexcept {
  if (max_depth == 0) return 0;
  if (!g_self_hi.load(std::memory_order_acquire)) init_self_range();
  Walk w{out,
         max_depth,
         0,
         g_self_lo.load(std::memory_order_relaxed),
         g_self_hi.load(std::memory_order_relaxed),
         true};
  _Unwind_Backtrace(on_frame, &w);
  return w.n;
}

}  // namespace cumemtrace::preload
