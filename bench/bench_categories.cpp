// label_categories (pytorch/categories.h) on a synthetic PyTorch training run of about
// CUMEMTRACE_BENCH_ENTRIES trace entries (default 1,000,000), as the collector calls it before
// every snapshot write: per step a forward (100 activations kept until backward, 50 temporaries),
// a backward (50 temporaries on the autograd thread), an optimizer step (10 temporaries) and the
// ownership walks of 150 parameters, 150 gradients and 300 optimizer state tensors sent every
// step (the worst case: the Python side sends a walk only when it changed). The target: well
// under a second for 1 M entries. Also the ledger (pytorch/ledger.h) of the same run, as report
// builds it, and the whole of report's model of it (BM_Report: verdicts/report.h build_report, its
// rows, ledger and by-module view from one analysed view, analysis/analysed_snapshot.h).
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "analysis/frames.h"
#include "pytorch/categories.h"
#include "pytorch/ledger.h"
#include "support/torch_run_builder.h"
#include "verdicts/report.h"

using namespace cumemtrace;

namespace {

uint64_t entries_wanted() {
  const char* e = std::getenv("CUMEMTRACE_BENCH_ENTRIES");
  return e ? std::strtoull(e, nullptr, 10) : 1'000'000;
}

const snap::Snapshot& run() {
  static const snap::Snapshot s = [] {
    testing::TorchRunBuilder b;
    std::vector<int32_t> lines;
    for (int i = 0; i < 64; ++i) lines.push_back(b.line("model.py", 10 + i, "forward"));
    const uint64_t kBlock = 1 << 20;
    uint64_t next = 0x100000000;
    auto take = [&] {
      const uint64_t a = next;
      next += kBlock;
      return a;
    };
    b.segment(1, 0x100000000, 1ull << 40);
    int64_t t = 10;
    std::vector<std::pair<uint64_t, uint64_t>> params, grads, state;
    for (int i = 0; i < 150; ++i) {
      params.push_back({take(), kBlock});
      b.alloc(t++, params.back().first, kBlock, lines[static_cast<size_t>(i % 64)]);
    }
    const uint64_t pool = next;  // per-step tensors cycle through this range
    const uint64_t per_step = 210 * 3;
    const uint64_t steps = entries_wanted() / per_step + 1;
    for (uint64_t k = 0; k < steps; ++k) {
      next = pool;
      b.start(t++, "auto:forward");
      std::vector<uint64_t> acts;
      for (int i = 0; i < 100; ++i) {
        acts.push_back(take());
        b.alloc(t++, acts.back(), kBlock, lines[static_cast<size_t>(i % 64)]);
      }
      for (int i = 0; i < 50; ++i) {
        const uint64_t a = take();
        b.alloc(t++, a, kBlock, lines[static_cast<size_t>(i % 64)]);
        b.free(t++, a);
      }
      b.end(t++, "auto:forward");
      b.start(t++, "auto:backward");
      for (int i = 0; i < 50; ++i) {
        const uint64_t a = take();
        b.alloc(t++, a, kBlock, lines[static_cast<size_t>(i % 64)],
                testing::TorchRunBuilder::kAutogradTid);
        b.free(t++, a, testing::TorchRunBuilder::kAutogradTid);
      }
      for (uint64_t a : acts) b.free(t++, a, testing::TorchRunBuilder::kAutogradTid);
      b.end(t++, "auto:backward");
      b.start(t++, "auto:optimizer");
      for (int i = 0; i < 10; ++i) {
        const uint64_t a = take();
        b.alloc(t++, a, kBlock, lines[static_cast<size_t>(i % 64)]);
        b.free(t++, a);
      }
      if (k == 0) {
        next = pool + 1000 * kBlock;
        for (int i = 0; i < 150; ++i) grads.push_back({take(), kBlock});
        for (int i = 0; i < 300; ++i) state.push_back({take(), kBlock});
        for (const auto& g : grads) b.alloc(t++, g.first, kBlock, lines[0]);
        for (const auto& o : state) b.alloc(t++, o.first, kBlock, lines[1]);
      }
      b.end(t, "auto:optimizer");
      b.walk(t, snap::OwnerRole::kParameter, params);
      b.walk(t, snap::OwnerRole::kGradient, grads);
      b.walk(t, snap::OwnerRole::kOptimizerState, state);
      b.mark(t++, "auto:step");
    }
    return b.finish();
  }();
  return s;
}

void counters(benchmark::State& state) {
  state.counters["entries"] = static_cast<double>(run().device_traces[0].size());
}

void BM_LabelCategories(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    auto s = run();
    state.ResumeTiming();
    analysis::label_categories(s);
    benchmark::DoNotOptimize(s.device_traces[0].data());
  }
  counters(state);
}

void BM_Ledger(benchmark::State& state) {
  auto s = run();
  analysis::label_categories(s);
  const analysis::SiteTable sites(s);
  for (auto _ : state) {
    const auto l = analysis::build_ledger(s, sites);
    benchmark::DoNotOptimize(l->devices.data());
  }
  counters(state);
}

void BM_Report(benchmark::State& state) {
  auto s = run();
  analysis::label_categories(s);
  const analysis::SiteTable sites(s);
  for (auto _ : state) {
    const auto r = analysis::build_report(s, sites, "run.json");
    benchmark::DoNotOptimize(r.devices.data());
  }
  counters(state);
}

}  // namespace

BENCHMARK(BM_LabelCategories)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_Ledger)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_Report)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_MAIN();
