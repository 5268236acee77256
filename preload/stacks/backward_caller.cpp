#include "stacks/backward_caller.h"

#include <atomic>

#include "wire/wire_format.h"

namespace cumemtrace::preload {

namespace {

// Even: stable; odd: a lender is writing. The words are atomics so that a torn read is a race the
// sequence check rejects, never undefined behaviour.
std::atomic<uint64_t> g_seq{0};
std::atomic<unsigned> g_count{0};
std::atomic<uint64_t> g_pairs[2 * wire::kMaxPythonFrames];

}  // namespace

void lend_backward_caller(const uint64_t* pairs, unsigned n) noexcept {
  if (n > wire::kMaxPythonFrames) n = wire::kMaxPythonFrames;
  if (!pairs) n = 0;
  uint64_t seq = g_seq.load(std::memory_order_relaxed);
  // Lenders are Python calls, never hooks: one waits for another's few stores to finish.
  while ((seq & 1) || !g_seq.compare_exchange_weak(seq, seq + 1, std::memory_order_acquire,
                                                   std::memory_order_relaxed)) {
    seq = g_seq.load(std::memory_order_relaxed);
  }
  // Release stores, no fence (TSan cannot check fences): a reader that sees any new word also
  // sees the odd sequence number stored before it, so its final check rejects the read.
  for (unsigned i = 0; i < 2 * n; ++i) g_pairs[i].store(pairs[i], std::memory_order_release);
  g_count.store(n, std::memory_order_release);
  g_seq.store(seq + 2, std::memory_order_release);
}

unsigned backward_caller_frames(uint64_t* out, unsigned max) noexcept {
  const uint64_t before = g_seq.load(std::memory_order_acquire);
  if (before & 1) return 0;
  unsigned n = g_count.load(std::memory_order_acquire);
  if (n == 0) return 0;
  if (n > max) n = max;
  // Acquire loads keep the final sequence load after them (no fence, as above).
  for (unsigned i = 0; i < 2 * n; ++i) out[i] = g_pairs[i].load(std::memory_order_acquire);
  return g_seq.load(std::memory_order_relaxed) == before ? n : 0;
}

}  // namespace cumemtrace::preload
