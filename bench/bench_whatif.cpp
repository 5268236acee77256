// `cumemtrace whatif` on a synthetic PyTorch snapshot of CUMEMTRACE_BENCH_EVENTS requests and
// frees (default 1,000,000: 500,000 tensors, about 2.1 M trace entries with their free_requested
// and segment events), shaped like a training loop: a working set of ~1,000 tensors from 512 B to
// 64 MiB on two streams, with empty_cache() every 100,000 events. Its segment events are the
// allocator model's own answer under the default configuration, so the recorded replay reproduces
// them, as it must on a real file. Targets (issue 55): `whatif --sweep` (the recorded
// configuration and the 6 usual settings, ranked) within 3 s (BM_Sweep, the replays alone); reading
// the file and the one replay that gives every request its block (label_block_sizes, what every
// view pays) within 2 s (BM_ReadLabel). BM_Whatif times the replay of two settings alone.
#include <benchmark/benchmark.h>

#include <unistd.h>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <streambuf>

#include "analysis/frames.h"
#include "io/snapshot_input.h"
#include "pytorch/torch_allocator_model.h"
#include "pytorch/whatif.h"
#include "snapshot/snapshot_json_writer.h"

using namespace cumemtrace;

namespace {

class NullBuf : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

uint64_t events_wanted() {
  const char* e = std::getenv("CUMEMTRACE_BENCH_EVENTS");
  return e ? std::strtoull(e, nullptr, 10) : 1'000'000;
}

snap::Snapshot generate(uint64_t events) {
  snap::Snapshot s;
  s.device_traces.resize(1);
  s.allocator_settings["PYTORCH_CUDA_ALLOC_CONF"] = "";
  for (int i = 0; i < 32; ++i) {
    s.stacks.push_back({{"model/layers.py", 100 + i, "forward_" + std::to_string(i)},
                        {"train.py", 40, "train_step"}});
  }
  auto& tr = s.device_traces[0];
  analysis::torch_alloc::CachingAllocatorModel m({}, std::nullopt);
  struct Live {
    int32_t block;
    uint64_t addr, size, stream;
  };
  std::vector<Live> live;
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  int64_t t = 1'700'000'000'000'000;
  auto rand = [&] { return rng = rng * 6364136223846793005ull + 1442695040888963407ull; };
  auto segments = [&] {
    for (const auto& e : m.take_events()) {
      tr.push_back({e.action, e.addr, e.size, e.stream, t, snap::kNoStack});
      tr.back().source = snap::Source::kPytorch;
    }
  };
  for (uint64_t ev = 0; ev < events; ++ev) {
    t += 3;
    if (ev % 100'000 == 99'999) {
      m.empty_cache();
      segments();
    }
    const bool alloc = live.size() < 500 || (live.size() < 2000 && (rand() >> 40) % 2 == 0);
    if (alloc) {
      const uint64_t r = rand();
      const uint64_t size = (512ull << ((r >> 50) % 18)) + ((r >> 20) % 4096) * 8;
      const uint64_t stream = (r >> 10) % 8 == 0 ? 0x5a5a00 : 0;
      const int32_t b = m.malloc(size, stream);
      segments();
      const uint64_t addr = m.block_address(b);
      tr.push_back(
          {snap::Action::kAlloc, addr, size, stream, t, static_cast<int32_t>((r >> 30) % 32)});
      live.push_back({b, addr, size, stream});
    } else {
      const size_t i = (rand() >> 20) % live.size();
      const Live l = live[i];
      tr.push_back({snap::Action::kFreeRequested, l.addr, l.size, l.stream, t, snap::kNoStack});
      tr.push_back({snap::Action::kFreeCompleted, l.addr, l.size, l.stream, t, snap::kNoStack});
      m.free(l.block);
      live[i] = live.back();
      live.pop_back();
    }
  }
  return s;
}

struct Fixture {
  std::string path;
  uint64_t bytes = 0, entries = 0;
  Fixture() {
    const auto s = generate(events_wanted());
    entries = s.device_traces[0].size();
    path = (std::filesystem::temp_directory_path() /
            ("cumemtrace-bench-whatif-" + std::to_string(::getpid()) + ".json"))
               .string();
    path = snap::write_snapshot_file(s, path);
    bytes = std::filesystem::file_size(path);
  }
  ~Fixture() { std::filesystem::remove(path); }
};

const Fixture& fixture() {
  static Fixture f;
  return f;
}

analysis::WhatIfOptions options() {
  analysis::WhatIfOptions o;
  o.alloc_confs = {"expandable_segments:True", "max_split_size_mb:64"};
  return o;
}

void set_counters(benchmark::State& state) {
  state.counters["events"] = static_cast<double>(events_wanted());
  state.counters["entries"] = static_cast<double>(fixture().entries);
  state.counters["MB"] = static_cast<double>(fixture().bytes) / 1e6;
}

void BM_Whatif(benchmark::State& state) {
  const auto s = snap::read_snapshot_any(fixture().path);
  for (auto _ : state) benchmark::DoNotOptimize(analysis::replay_whatif(s, options()));
  set_counters(state);
}

// What `cumemtrace whatif FILE --alloc-conf ... --alloc-conf ...` costs, file to table.
void BM_ReadWhatif(benchmark::State& state) {
  NullBuf buf;
  std::ostream null(&buf);
  for (auto _ : state) {
    const auto s = snap::read_snapshot_any(fixture().path);
    const auto r = analysis::replay_whatif(s, options());
    analysis::print_whatif_text(r, s, analysis::SiteTable(s), "bench.json", null);
  }
  set_counters(state);
}

// `whatif --sweep`: the recorded configuration and kSweep's six, ranked.
void BM_Sweep(benchmark::State& state) {
  const auto s = snap::read_snapshot_any(fixture().path);
  analysis::WhatIfOptions o;
  o.sweep = true;
  for (auto _ : state) benchmark::DoNotOptimize(analysis::replay_whatif(s, o));
  set_counters(state);
}

// What every view (report, check, diff, html) pays for PyTorch's block bytes: the file read and
// the one replay of the recorded configuration.
void BM_ReadLabel(benchmark::State& state) {
  for (auto _ : state) {
    auto s = snap::read_snapshot_any(fixture().path);
    if (analysis::label_block_sizes(s) != 1) state.SkipWithError("the replay labelled nothing");
    benchmark::DoNotOptimize(s);
  }
  set_counters(state);
}

}  // namespace

BENCHMARK(BM_Sweep)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_ReadLabel)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_Whatif)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_ReadWhatif)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_MAIN();
