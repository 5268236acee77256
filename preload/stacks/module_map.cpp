#include "stacks/module_map.h"

#include <link.h>

#include <algorithm>
#include <atomic>

#include "core/emitter.h"

namespace cumemtrace::preload {

namespace {

// Executable ranges of the modules the collector knows, sorted, double-buffered: a rescan builds
// the next table in the idle buffer and publishes (generation, count) with one atomic store, so
// the lookup on the hot path is a lock-free binary search. A reader that is slow enough to span
// two rescans could see its buffer rewritten under it: every rescan first announces the
// generation it is writing (g_writing, ordered before its range stores by their release), and a
// lookup that finds that generation two ahead of its own treats the answer as a miss. A module
// beyond kMaxRanges is still sent; it is only re-checked by a rescan each time one of its frames
// is seen.
constexpr unsigned kMaxRanges = 2048;
struct Range {
  uint64_t lo, hi;
};
struct SharedRange {
  std::atomic<uint64_t> lo, hi;
};
SharedRange g_buf[2][kMaxRanges];
Range g_scratch[kMaxRanges];           // the table being built; only under g_lock
std::atomic<uint64_t> g_published{0};  // (generation << 32) | count; buffer = generation & 1
std::atomic<uint32_t> g_writing{0};    // generation a rescan is writing (or last wrote)
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
  uint64_t old;  // the published (generation, count) the scan started from
};

// Acquire loads: a range written by a newer rescan makes that rescan's g_writing visible. The
// range found is stored in *found.
bool contains(uint64_t pub, uint64_t ip, Range* found = nullptr) noexcept {
  const SharedRange* r = g_buf[(pub >> 32) & 1];
  unsigned lo = 0, hi = static_cast<unsigned>(pub & 0xffffffffu);
  while (lo < hi) {
    const unsigned mid = (lo + hi) / 2;
    const uint64_t range_lo = r[mid].lo.load(std::memory_order_acquire);
    const uint64_t range_hi = r[mid].hi.load(std::memory_order_acquire);
    if (ip < range_lo) {
      hi = mid;
    } else if (ip >= range_hi) {
      lo = mid + 1;
    } else {
      if (found) *found = Range{range_lo, range_hi};
      return true;
    }
  }
  return false;
}

// A lookup whose buffer may have been rewritten while it ran is a miss (the caller rescans).
bool contains_stable(uint64_t pub, uint64_t ip, Range* found) noexcept {
  const bool hit = contains(pub, ip, found);
  return hit && g_writing.load(std::memory_order_relaxed) < static_cast<uint32_t>(pub >> 32) + 2;
}

// The ranges this thread's last lookups found, valid while the table they came from is the one
// published: a stack's frames lie in a few modules (the program, libtorch, libpython), so most
// frames are answered here instead of by a binary search over every module (perf: the search
// was a fifth of an event's cost with 32-frame stacks).
struct RecentRanges {
  uint64_t pub;
  Range r[4];
  unsigned next;
};
constinit thread_local RecentRanges t_recent __attribute__((tls_model("initial-exec"))){};

bool recent(const RecentRanges& m, uint64_t ip) noexcept {
  for (const Range& r : m.r) {
    if (ip >= r.lo && ip < r.hi) return true;
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
  if (contains(s->old, lo)) {
    if (s->count < kMaxRanges) s->next[s->count++] = Range{lo, hi};
    return 0;
  }
  // New since the last scan. The main program has an empty name; the collector uses the exe path.
  record_string(wire::Kind::kModule, info->dlpi_addr, info->dlpi_name ? info->dlpi_name : "");
  if (s->count < kMaxRanges) s->next[s->count++] = Range{lo, hi};
  return 0;
}

// Rebuilds and publishes the table; returns whether ip lies in a module of the new table. A
// thread that finds another one rescanning does not wait for it (it may be inside
// dl_iterate_phdr, or waiting for room in the ring to announce a module): that scan announces
// every module not yet sent, and the collector resolves frames only when it writes the snapshot,
// so an announcement recorded after the event that needs it is in time. Returns true then, so
// that the address is not taken for a stray.
bool rescan(uint64_t ip) noexcept {
  if (g_lock.test_and_set(std::memory_order_acquire)) return true;
  const uint64_t pub = g_published.load(std::memory_order_relaxed);
  const uint32_t gen = static_cast<uint32_t>(pub >> 32) + 1;
  Scan s{g_scratch, 0, pub};
  dl_iterate_phdr(visit, &s);
  std::sort(s.next, s.next + s.count, [](const Range& a, const Range& b) { return a.lo < b.lo; });
  g_writing.store(gen, std::memory_order_relaxed);
  SharedRange* out = g_buf[gen & 1];
  bool hit = false;
  for (unsigned i = 0; i < s.count; ++i) {
    out[i].lo.store(s.next[i].lo, std::memory_order_release);
    out[i].hi.store(s.next[i].hi, std::memory_order_release);
    hit |= ip >= s.next[i].lo && ip < s.next[i].hi;
  }
  g_published.store((uint64_t{gen} << 32) | s.count, std::memory_order_release);
  g_lock.clear(std::memory_order_release);
  return hit;
}

}  // namespace

void modules_reset() noexcept {
  g_published.store(0, std::memory_order_relaxed);
  g_writing.store(0, std::memory_order_relaxed);
  // In a forked child the thread that held the lock (in a rescan) does not exist.
  g_lock.clear(std::memory_order_relaxed);
}

uint32_t modules_generation() noexcept {
  return static_cast<uint32_t>(g_published.load(std::memory_order_acquire) >> 32);
}

void modules_send_all() noexcept {
  rescan(0);
}

void modules_note_frames(const uint64_t* frames, unsigned n) noexcept {
  const uint64_t pub = g_published.load(std::memory_order_acquire);
  RecentRanges& m = t_recent;
  if (m.pub != pub) m = RecentRanges{pub, {}, 0};
  for (unsigned i = 0; i < n; ++i) {
    if (recent(m, frames[i])) continue;
    Range found{};
    if (contains_stable(pub, frames[i], &found)) {
      m.r[m.next++ % 4] = found;
      continue;
    }
    if (is_stray(frames[i])) continue;
    if (!rescan(frames[i])) {
      const unsigned slot = g_stray_next.fetch_add(1, std::memory_order_relaxed) % kMaxStrayPages;
      g_stray[slot].store((frames[i] >> 12) + 1, std::memory_order_relaxed);
    }
    return;
  }
}

}  // namespace cumemtrace::preload
