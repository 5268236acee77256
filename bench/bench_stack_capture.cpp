// Stack capture cost: the cached CFI unwinder against _Unwind_Backtrace, capturing 8 or 32
// frames from a 40-deep stack (built by tests/unwind/CMakeLists.txt, which owns this target).
#include <benchmark/benchmark.h>

#include <cstdint>

#include "cfi_unwinder.h"

namespace cfi = cumemtrace::preload::cfi;

namespace {

using UnwindFn = int (*)(uint64_t*, unsigned, uint64_t, uint64_t, cfi::FirstSeen*, uint64_t);

struct Job {
  benchmark::State* state;
  UnwindFn unwind;
  unsigned max_depth;
};

__attribute__((noinline)) void capture_loop(const Job& job) {
  uint64_t frames[64];
  int n = 0;
  for (auto _ : *job.state) {
    n = job.unwind(frames, job.max_depth, 0, 0, nullptr, 0);
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

void BM_unwind_backtrace(benchmark::State& state) {
  deep(40, Job{&state, &cfi::unwind_slow, static_cast<unsigned>(state.range(0))});
}

}  // namespace

BENCHMARK(BM_fast)->Arg(8)->Arg(32);
BENCHMARK(BM_unwind_backtrace)->Arg(8)->Arg(32);

BENCHMARK_MAIN();
