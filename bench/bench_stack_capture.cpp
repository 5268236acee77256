// Stack capture cost: the cached CFI unwinder against _Unwind_Backtrace, capturing 8 or 32
// frames from a 40-deep stack (built by tests/preload/unwind/CMakeLists.txt, which owns this
// target). The `evicted` variants stream 8 MiB through the caches before every timed walk, as a
// training step does between two allocations: the walk then reads its stack slots and the
// memo's rules from L3 or memory instead of L1, which is what it costs inside PyTorch.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "cfi_unwinder.h"

namespace cfi = cumemtrace::preload::cfi;

namespace {

using UnwindFn = int (*)(uint64_t*, unsigned, uint64_t, uint64_t, cfi::FirstSeen*, uint64_t);

struct Job {
  benchmark::State* state;
  UnwindFn unwind;
  unsigned max_depth;
  bool evict = false;
};

// Reads and writes every line of 8 MiB (more than L1 and L2, a sixth of a server's L3).
void evict_caches() {
  static std::vector<uint64_t> junk(1u << 20, 1);
  for (size_t i = 0; i < junk.size(); i += 8) junk[i] += 1;
  benchmark::ClobberMemory();
}

__attribute__((noinline)) void capture_loop(const Job& job) {
  uint64_t frames[64];
  int n = 0;
  for (auto _ : *job.state) {
    if (job.evict) {
      evict_caches();
      const auto t0 = std::chrono::steady_clock::now();
      n = job.unwind(frames, job.max_depth, 0, 0, nullptr, 0);
      const auto t1 = std::chrono::steady_clock::now();
      job.state->SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    } else {
      n = job.unwind(frames, job.max_depth, 0, 0, nullptr, 0);
    }
    benchmark::DoNotOptimize(frames);
  }
  if (n != static_cast<int>(job.max_depth)) job.state->SkipWithError("short or fallen-back stack");
  const cfi::CacheStats s = cfi::thread_cache_stats();
  job.state->counters["fallbacks"] = static_cast<double>(s.fallbacks);
}

__attribute__((noinline)) void deep(int depth, const Job& job) {
  if (depth <= 1) {
    capture_loop(job);
  } else {
    deep(depth - 1, job);
  }
  asm volatile("" ::: "memory");
}

void BM_fast(benchmark::State& state) {
  deep(40, Job{&state, &cfi::unwind_fast, static_cast<unsigned>(state.range(0))});
}

void BM_fast_evicted(benchmark::State& state) {
  deep(40, Job{&state, &cfi::unwind_fast, static_cast<unsigned>(state.range(0)), true});
}

void BM_unwind_backtrace(benchmark::State& state) {
  deep(40, Job{&state, &cfi::unwind_slow, static_cast<unsigned>(state.range(0))});
}

}  // namespace

BENCHMARK(BM_fast)->Arg(8)->Arg(32);
BENCHMARK(BM_fast_evicted)->Arg(8)->Arg(32)->UseManualTime()->Iterations(3000);
BENCHMARK(BM_unwind_backtrace)->Arg(8)->Arg(32);

BENCHMARK_MAIN();
