// Stack capture cost: the cached CFI unwinder against _Unwind_Backtrace, capturing 8 or 32
// frames from a 40-deep stack (built by tests/preload/unwind/CMakeLists.txt, which owns this
// target). The `evicted` variants stream 8 MiB through the caches before every timed walk, as a
// training step does between two allocations: the walk then reads its stack slots and the
// memo's rules from L3 or memory instead of L1, which is what it costs inside PyTorch.
// BM_sites_evicted walks from 12 call sites in turn, as a training step allocates from a few
// dozen: each walk's last two neighbours are other call sites, so only the unwinder's index of
// recent walks finds the frames this call site had the round before.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <vector>

#include "stacks/cfi_unwinder.h"

namespace cfi = cumemtrace::preload::cfi;

namespace {

using UnwindFn = int (*)(uint64_t*, unsigned, uint64_t, uint64_t, cfi::FirstSeen*, uint64_t,
                         const cfi::CodeRange*);

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
      n = job.unwind(frames, job.max_depth, 0, 0, nullptr, 0, nullptr);
      const auto t1 = std::chrono::steady_clock::now();
      job.state->SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    } else {
      n = job.unwind(frames, job.max_depth, 0, 0, nullptr, 0, nullptr);
    }
    benchmark::DoNotOptimize(frames);
  }
  if (n != static_cast<int>(job.max_depth)) job.state->SkipWithError("short or fallen-back stack");
  const cfi::CacheStats s = cfi::thread_cache_stats();
  job.state->counters["fallbacks"] = static_cast<double>(s.fallbacks);
}

// `depth` frames of this function, then body(): the outer frames every timed walk goes through.
template <typename Body>
__attribute__((noinline)) void nest(int depth, const Body& body) {
  if (depth <= 1) {
    body();
  } else {
    nest(depth - 1, body);
  }
  asm volatile("" ::: "memory");
}

void BM_fast(benchmark::State& state) {
  const Job job{&state, &cfi::unwind_fast, static_cast<unsigned>(state.range(0))};
  nest(40, [&] { capture_loop(job); });
}

void BM_fast_evicted(benchmark::State& state) {
  const Job job{&state, &cfi::unwind_fast, static_cast<unsigned>(state.range(0)), true};
  nest(40, [&] { capture_loop(job); });
}

void BM_unwind_backtrace(benchmark::State& state) {
  const Job job{&state, &cfi::unwind_slow, static_cast<unsigned>(state.range(0))};
  nest(40, [&] { capture_loop(job); });
}

// 12 call sites, each a different 16-frame chain (at every level one of two functions, chosen
// by a bit of the site's number) under the same 20 outer frames.
struct Sites {
  benchmark::State* state;
  double seconds = 0;
  unsigned frames = 0;
};
__attribute__((noinline)) void site_step_a(int level, unsigned which, Sites& s);
__attribute__((noinline)) void site_step_b(int level, unsigned which, Sites& s);

void site_next(int level, unsigned which, Sites& s) {
  if (level == 0) {
    evict_caches();
    uint64_t frames[64];
    const auto t0 = std::chrono::steady_clock::now();
    const int n = cfi::unwind_fast(frames, 32, 0, 0, nullptr, 0);
    const auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(frames);
    s.seconds = std::chrono::duration<double>(t1 - t0).count();
    s.frames = n > 0 ? static_cast<unsigned>(n) : 0;
    return;
  }
  ((which >> (level % 4)) & 1 ? site_step_a : site_step_b)(level - 1, which, s);
}
void site_step_a(int level, unsigned which, Sites& s) {
  site_next(level, which, s);
  asm volatile("" ::: "memory");
}
void site_step_b(int level, unsigned which, Sites& s) {
  volatile char pad[48];
  pad[0] = 0;
  site_next(level, which ^ pad[0], s);
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void sites_loop(Sites& s) {
  const uint64_t replayed_before = cfi::thread_cache_stats().replayed;
  unsigned i = 0;
  for (auto _ : *s.state) {
    site_next(16, i++ % 12, s);
    s.state->SetIterationTime(s.seconds);
  }
  if (s.frames != 32) s.state->SkipWithError("short or fallen-back stack");
  const cfi::CacheStats st = cfi::thread_cache_stats();
  s.state->counters["replayed"] = benchmark::Counter(
      static_cast<double>(st.replayed - replayed_before), benchmark::Counter::kAvgIterations);
}

void BM_sites_evicted(benchmark::State& state) {
  Sites s{&state};
  nest(20, [&] { sites_loop(s); });
}

}  // namespace

BENCHMARK(BM_fast)->Arg(8)->Arg(32);
BENCHMARK(BM_fast_evicted)->Arg(1)->Arg(8)->Arg(32)->UseManualTime()->Iterations(3000);
BENCHMARK(BM_sites_evicted)->UseManualTime()->Iterations(3000);
BENCHMARK(BM_unwind_backtrace)->Arg(8)->Arg(32);

BENCHMARK_MAIN();
