#include "stacks/stack_capture.h"

#include <dlfcn.h>
#include <link.h>

#include <atomic>

#include "core/config.h"
#include "stacks/cfi_unwinder.h"

namespace cumemtrace::preload {

namespace {

// The text range of libcumemtrace itself: frames inside it are ours, not the application's.
std::atomic<uint64_t> g_self_lo{0};
std::atomic<uint64_t> g_self_hi{0};

struct TextSearch {
  uintptr_t base;
  cfi::CodeRange range;
};

int find_text(dl_phdr_info* info, size_t, void* data) {
  auto* search = static_cast<TextSearch*>(data);
  if (info->dlpi_addr != search->base) return 0;
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    const uint64_t a = info->dlpi_addr + ph.p_vaddr;
    if (a < lo) lo = a;
    if (a + ph.p_memsz > hi) hi = a + ph.p_memsz;
  }
  if (hi > lo) search->range = cfi::CodeRange{lo, hi};
  return 1;
}

void init_self_range() noexcept {
  cfi::CodeRange self;
  if (module_text(reinterpret_cast<void*>(&capture_stack), self)) {
    g_self_lo.store(self.lo, std::memory_order_relaxed);
    g_self_hi.store(self.hi, std::memory_order_release);
  }
  if (!g_self_hi.load(std::memory_order_acquire)) g_self_hi.store(1, std::memory_order_release);
}

}  // namespace

bool module_text(const void* addr, cfi::CodeRange& out) noexcept {
  Dl_info di;
  if (!dladdr(addr, &di) || !di.dli_fbase) return false;
  TextSearch search{reinterpret_cast<uintptr_t>(di.dli_fbase), {}};
  dl_iterate_phdr(find_text, &search);
  if (search.range.hi <= search.range.lo) return false;
  out = search.range;
  return true;
}

unsigned capture_stack(uint64_t* out, unsigned max_depth, cfi::FirstSeen* first_seen,
                       uint64_t stop_at, const cfi::WalkStart* start,
                       const cfi::CodeRange* stop_in) noexcept {
  if (max_depth == 0) return 0;
  if (!g_self_hi.load(std::memory_order_acquire)) init_self_range();
  const uint64_t lo = g_self_lo.load(std::memory_order_relaxed);
  const uint64_t hi = g_self_hi.load(std::memory_order_relaxed);
  int n = cfi::kFallback;
  // CUMEMTRACE_SLOW_UNWIND=1 keeps every stack on _Unwind_Backtrace: a way out should the cached
  // unwinder ever misread some code, and the baseline for measuring it.
  if (!config().slow_unwind) {
    n = start && start->pc
            ? cfi::unwind_fast_from(*start, out, max_depth, lo, hi, first_seen, stop_at, stop_in)
            : cfi::unwind_fast(out, max_depth, lo, hi, first_seen, stop_at, stop_in);
  }
  if (n == cfi::kFallback) {
    n = cfi::unwind_slow(out, max_depth, lo, hi, first_seen, stop_at, stop_in);
  }
  return static_cast<unsigned>(n);
}

}  // namespace cumemtrace::preload
