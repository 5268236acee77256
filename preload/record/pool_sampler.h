// Contract: samples of the stream-ordered memory pools (cuMemAllocAsync / cudaMallocAsync, and
// PyTorch's backend:cudaMallocAsync): how many bytes the driver holds reserved for a pool and how
// many of them are in use, recorded as kPoolUsage events among the allocations so that a view can
// say "reserved = allocated + cached free" for pools as it does for PyTorch's caching allocator.
// Off the hot path: after a successful pool allocation at most once per interval per device (the
// cost otherwise is one compare of the time the allocation's own event reads), before an
// out-of-memory result is recorded (so the OOM snapshot has the pool's state), and at exit once per
// device whose current pool was used (pools the program created may be destroyed by then). A pool's
// reserved memory grows only inside an allocation call; a trim between two samples shows in the
// next one. noexcept, no heap, no locks (per-device atomics); the driver calls need no current
// context.
#pragma once

#include <atomic>
#include <cstdint>

namespace cumemtrace::preload {

inline constexpr int kPoolDevices = 64;
// Per device, the event_time() from which the next sample is due (0: now).
extern std::atomic<uint64_t> g_pool_next_due[kPoolDevices];
// Devices whose current pool was allocated from: sampled again at exit.
extern std::atomic<bool> g_pool_current_used[kPoolDevices];

bool after_pool_alloc_slow(int device, uint64_t pool, bool force, uint64_t now) noexcept;

// After a pool allocation on CUDA ordinal `device` (pool 0: the device's current pool), at `now`
// (event_time()). `force` samples regardless of the interval. True when a sample was recorded:
// the allocation's own event then reads its time anew, so that it follows the sample's. Inline:
// between two samples it is two loads and a compare in the hook.
inline bool after_pool_alloc(int device, uint64_t pool, bool force, uint64_t now) noexcept {
  if (!force && device >= 0 && device < kPoolDevices &&
      now < g_pool_next_due[device].load(std::memory_order_relaxed) &&
      (pool || g_pool_current_used[device].load(std::memory_order_relaxed))) {
    return false;
  }
  return after_pool_alloc_slow(device, pool, force, now);
}
// At exit: one last sample of the current pool of every device allocated from it.
void sample_pools_at_exit() noexcept;
// In a forked child: the parent's pools are not the child's.
void forget_pools() noexcept;

}  // namespace cumemtrace::preload
