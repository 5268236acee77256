#include "record/pool_sampler.h"

#include <atomic>

#include "core/event_clock.h"
#include "driver/real_driver.h"
#include "record/recorder.h"

namespace cumemtrace::preload {
namespace {

// Pools change size only when an allocation grows them or a trim shrinks them: at most 100
// samples a second per device (each ~1 us) cost nothing measurable, and the collector keeps only
// the samples where the reserved bytes changed.
constexpr uint64_t kIntervalNs = 10'000'000;

bool sample(int device, uint64_t pool) noexcept {
  uint64_t handle = 0, reserved = 0, used = 0;
  if (!pool_usage(device, pool, &handle, &reserved, &used)) return false;
  EventArgs a{wire::Kind::kPoolUsage};
  a.addr = handle;
  a.size = reserved;
  a.aux = used;
  a.device = device;
  record(a);
  return true;
}

}  // namespace

// The interval is compared in the events' own clock: a coarse clock read per pool allocation was
// 9 ns of a ~700 ns pool-hit pair on the H200 host (bench/gpu/hook_costs.cu).
std::atomic<uint64_t> g_pool_next_due[kPoolDevices];
// Pools named by cuMemAllocFromPoolAsync are not marked (the program may have destroyed them by
// the time of the exit's sample).
std::atomic<bool> g_pool_current_used[kPoolDevices];

bool after_pool_alloc_slow(int device, uint64_t pool, bool force, uint64_t now) noexcept {
  if (device < 0 || device >= kPoolDevices) return false;
  if (!pool && !g_pool_current_used[device].load(std::memory_order_relaxed)) {
    g_pool_current_used[device].store(true, std::memory_order_relaxed);
  }
  uint64_t due = g_pool_next_due[device].load(std::memory_order_relaxed);
  if (!force && now < due) return false;
  // One thread samples per interval; the others go on.
  if (!g_pool_next_due[device].compare_exchange_strong(due, now + event_units(kIntervalNs),
                                                       std::memory_order_relaxed) &&
      !force) {
    return false;
  }
  return sample(device, pool);
}

void sample_pools_at_exit() noexcept {
  for (int d = 0; d < kPoolDevices; ++d) {
    if (g_pool_current_used[d].load(std::memory_order_relaxed)) sample(d, 0);
  }
}

void forget_pools() noexcept {
  for (auto& t : g_pool_next_due) t.store(0, std::memory_order_relaxed);
  for (auto& u : g_pool_current_used) u.store(false, std::memory_order_relaxed);
}

}  // namespace cumemtrace::preload
