#include "pool_sampler.h"

#include <time.h>

#include <atomic>

#include "event_clock.h"
#include "real_driver.h"
#include "recorder.h"

namespace cumemtrace::preload {
namespace {

// Pools change size only when an allocation grows them or a trim shrinks them: at most 100
// samples a second per device (each ~1 us) cost nothing measurable, and the collector keeps only
// the samples where the reserved bytes changed.
constexpr uint64_t kIntervalNs = 10'000'000;
constexpr int kMaxDevices = 64;

std::atomic<uint64_t> g_last_ns[kMaxDevices];
// Devices whose current pool was allocated from: sampled again at exit. Pools named by
// cuMemAllocFromPoolAsync are not (the program may have destroyed them by then).
std::atomic<bool> g_current_used[kMaxDevices];

void sample(int device, uint64_t pool) noexcept {
  uint64_t handle = 0, reserved = 0, used = 0;
  if (!pool_usage(device, pool, &handle, &reserved, &used)) return;
  EventArgs a{wire::Kind::kPoolUsage};
  a.addr = handle;
  a.size = reserved;
  a.aux = used;
  a.device = device;
  record(a);
}

}  // namespace

void after_pool_alloc(int device, uint64_t pool, bool force) noexcept {
  if (device < 0 || device >= kMaxDevices) return;
  if (!pool && !g_current_used[device].load(std::memory_order_relaxed)) {
    g_current_used[device].store(true, std::memory_order_relaxed);
  }
  const uint64_t now = clock_ns(CLOCK_MONOTONIC_COARSE);
  uint64_t last = g_last_ns[device].load(std::memory_order_relaxed);
  if (!force && last != 0 && now - last < kIntervalNs) return;
  // One thread samples per interval; the others go on.
  if (!g_last_ns[device].compare_exchange_strong(last, now, std::memory_order_relaxed) && !force) {
    return;
  }
  sample(device, pool);
}

void sample_pools_at_exit() noexcept {
  for (int d = 0; d < kMaxDevices; ++d) {
    if (g_current_used[d].load(std::memory_order_relaxed)) sample(d, 0);
  }
}

void forget_pools() noexcept {
  for (auto& t : g_last_ns) t.store(0, std::memory_order_relaxed);
  for (auto& u : g_current_used) u.store(false, std::memory_order_relaxed);
}

}  // namespace cumemtrace::preload
