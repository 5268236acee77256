#include "module_map.h"

#include <link.h>

#include <algorithm>
#include <atomic>

#include "recorder.h"

namespace cumemtrace::preload {

namespace {

// Executable ranges of the modules the collector knows, sorted, double-buffered: a rescan builds
// the next table in the idle buffer and publishes (buffer, count) with one atomic store, so the
// lookup on the hot path is a lock-free binary search. A module beyond kMaxRanges is still sent;
// it is only re-checked by a rescan each time one of its frames is seen.
constexpr unsigned kMaxRanges = 2048;
struct Range {
  uint64_t lo, hi;
};
Range g_buf[2][kMaxRanges];
std::atomic<uint64_t> g_published{0};  // (buffer index << 32) | count
std::atomic_flag g_lock = ATOMIC_FLAG_INIT;
// Pages of return addresses that belong to no module (JIT code, trampolines): remembered so that
// they do not trigger a rescan on every event.
constexpr unsigned kMaxStrayPages = 64;
std::atomic<uint64_t> g_stray[kMaxStrayPages];
std::atomic<unsigned> g_stray_next{0};

bool is_stray(uint64_t ip) noexcept {
  const uint64_t page = (ip >> 12) + 1;
  for (auto& s : g_stray) {
    if (s.load(std::memory_order_relaxed) == page) return true;
  }
  return false;
}

struct Scan {
  Range* next;
  unsigned count;
  const Range* old;
  unsigned old_count;
};

bool contains(const Range* r, unsigned n, uint64_t ip) noexcept {
  unsigned lo = 0, hi = n;
  while (lo < hi) {
    const unsigned mid = (lo + hi) / 2;
    if (ip < r[mid].lo) {
      hi = mid;
    } else if (ip >= r[mid].hi) {
      lo = mid + 1;
    } else {
      return true;
    }
  }
  return false;
}

int visit(dl_phdr_info* info, size_t, void* arg) {
  auto* s = static_cast<Scan*>(arg);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    const uint64_t a = info->dlpi_addr + ph.p_vaddr;
    lo = std::min(lo, a);
    hi = std::max(hi, a + ph.p_memsz);
  }
  if (hi == 0) return 0;
  if (contains(s->old, s->old_count, lo)) {
    if (s->count < kMaxRanges) s->next[s->count++] = Range{lo, hi};
    return 0;
  }
  // New since the last scan. The main program has an empty name; the collector uses the exe path.
  record_string(wire::Kind::kModule, info->dlpi_addr, info->dlpi_name ? info->dlpi_name : "");
  if (s->count < kMaxRanges) s->next[s->count++] = Range{lo, hi};
  return 0;
}

void rescan() noexcept {
  while (g_lock.test_and_set(std::memory_order_acquire)) {
  }
  const uint64_t pub = g_published.load(std::memory_order_acquire);
  const unsigned idx = static_cast<unsigned>(pub >> 32);
  Scan s{g_buf[idx ^ 1], 0, g_buf[idx], static_cast<unsigned>(pub & 0xffffffffu)};
  dl_iterate_phdr(visit, &s);
  std::sort(s.next, s.next + s.count, [](const Range& a, const Range& b) { return a.lo < b.lo; });
  g_published.store((uint64_t{idx ^ 1u} << 32) | s.count, std::memory_order_release);
  g_lock.clear(std::memory_order_release);
}

}  // namespace

void modules_reset() noexcept {
  g_published.store(0, std::memory_order_relaxed);
  // In a forked child the thread that held the lock (in a rescan) does not exist.
  g_lock.clear(std::memory_order_relaxed);
}

void modules_send_all() noexcept {
  rescan();
}

void modules_note_frames(const uint64_t* frames, unsigned n) noexcept {
  const uint64_t pub = g_published.load(std::memory_order_acquire);
  const Range* r = g_buf[pub >> 32];
  const unsigned count = static_cast<unsigned>(pub & 0xffffffffu);
  for (unsigned i = 0; i < n; ++i) {
    if (contains(r, count, frames[i]) || is_stray(frames[i])) continue;
    rescan();
    const uint64_t now = g_published.load(std::memory_order_acquire);
    if (!contains(g_buf[now >> 32], static_cast<unsigned>(now & 0xffffffffu), frames[i])) {
      const unsigned slot = g_stray_next.fetch_add(1, std::memory_order_relaxed) % kMaxStrayPages;
      g_stray[slot].store((frames[i] >> 12) + 1, std::memory_order_relaxed);
    }
    return;
  }
}

}  // namespace cumemtrace::preload
