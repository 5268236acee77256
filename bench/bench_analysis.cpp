// Reader + report + check on a synthetic snapshot of CUMEMTRACE_BENCH_EVENTS events (default
// 1,000,000: half allocations, half frees, i.e. 2.5 M trace entries in cumemtrace's layout),
// laid out as the collector writes it: 64 distinct 10-frame stacks, a working set of ~1,000 live
// allocations, a "step" mark every 10,000 events and 100 allocations still live at exit. The
// issue's target: read + report + check within 3 s. The file is generated once per process.
#include <benchmark/benchmark.h>

#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <streambuf>
#include <string_view>

#include "io/snapshot_input.h"
#include "snapshot/snapshot_json_writer.h"
#include "verdicts/check.h"
#include "verdicts/report.h"

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
  s.tool.emplace();
  s.tool->pid = 4242;
  s.tool->exe = "/opt/app/bin/trainer";
  s.tool->argv = {"trainer", "--epochs", "3"};
  s.tool->start_time_us = 1'700'000'000'000'000;
  s.tool->ended.how = "exit";
  for (int i = 0; i < 64; ++i) {
    snap::Stack st = {
        {"/usr/lib/x86_64-linux-gnu/libcuda.so.1", 0, "cuMemAlloc_v2"},
        {"/usr/local/cuda/lib64/libcudart.so.12", 0, "cudaMalloc"},
    };
    for (int d = 0; d < 8; ++d) {
      st.push_back({"/home/ci/src/project/model/layer_" + std::to_string((i + d) % 17) + ".cpp",
                    40 + i * 3 + d,
                    "project::model::Layer" + std::to_string(i) + "::forward_" + std::to_string(d) +
                        "(Tensor const&, Options const&)"});
    }
    s.stacks.push_back(std::move(st));
  }
  auto& tr = s.device_traces[0];
  tr.reserve(events * 5 / 2 + 16);
  std::vector<std::pair<uint64_t, uint64_t>> live;  // addr, size
  std::vector<int32_t> live_stack;
  uint64_t rng = 0x9e3779b97f4a7c15ull, next_addr = 0x7f0000000000ull;
  int64_t t = s.tool->start_time_us;
  auto rand = [&] { return rng = rng * 6364136223846793005ull + 1442695040888963407ull; };
  for (uint64_t ev = 0; ev < events; ++ev) {
    t += 3;
    if (ev % 10'000 == 0) s.annotations.push_back({"step", "MARK", 0, t});
    const uint64_t remaining = events - ev;
    bool do_alloc;
    if (live.empty()) {
      do_alloc = true;
    } else if (live.size() > 100 && remaining <= live.size() - 100) {
      do_alloc = false;  // wind down so that exactly 100 allocations leak
    } else if (live.size() >= 2000) {
      do_alloc = false;
    } else {
      do_alloc = live.size() < 500 || (rand() >> 40) % 2 == 0;
    }
    if (do_alloc) {
      const uint64_t size = 512ull << ((rand() >> 50) % 14);
      const auto stack = static_cast<int32_t>((rand() >> 45) % 64);
      const uint64_t addr = next_addr;
      next_addr += size + 4096;
      tr.push_back({snap::Action::kSegmentAlloc, addr, size, 0, t, snap::kNoStack, 0, 11});
      tr.push_back({snap::Action::kAlloc, addr, size, 0, t, stack, 0, 11});
      live.push_back({addr, size});
      live_stack.push_back(stack);
    } else {
      const size_t i = (rand() >> 20) % live.size();
      const auto [addr, size] = live[i];
      tr.push_back({snap::Action::kFreeRequested, addr, size, 0, t, snap::kNoStack, 0, 11});
      tr.push_back({snap::Action::kFreeCompleted, addr, size, 0, t, snap::kNoStack, 0, 11});
      tr.push_back({snap::Action::kSegmentFree, addr, size, 0, t, snap::kNoStack, 0, 11});
      live[i] = live.back();
      live.pop_back();
      live_stack[i] = live_stack.back();
      live_stack.pop_back();
    }
  }
  for (size_t i = 0; i < live.size(); ++i) {
    snap::Segment g;
    g.address = live[i].first;
    g.total_size = g.allocated_size = g.active_size = g.requested_size = live[i].second;
    g.stack = live_stack[i];
    g.blocks.push_back({g.address, g.total_size, g.total_size, "active_allocated", g.stack});
    s.segments.push_back(std::move(g));
  }
  s.tool->events_total = events;
  s.tool->end_time_us = t;
  return s;
}

struct Fixture {
  std::string path;
  uint64_t bytes = 0;
  uint64_t entries = 0;
  Fixture() {
    const auto s = generate(events_wanted());
    for (const auto& tr : s.device_traces) entries += tr.size();
    path = (std::filesystem::temp_directory_path() /
            ("cumemtrace-bench-" + std::to_string(::getpid()) + ".json"))
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

analysis::CheckOptions check_options() {
  analysis::CheckOptions o;
  o.max_leaked_bytes = 0;
  o.max_peak_bytes = uint64_t{1} << 40;
  o.max_growth = uint64_t{1} << 30;
  o.mark = "step";
  return o;
}

void set_counters(benchmark::State& state) {
  state.counters["events"] = static_cast<double>(events_wanted());
  state.counters["entries"] = static_cast<double>(fixture().entries);
  state.counters["MB"] = static_cast<double>(fixture().bytes) / 1e6;
}

void BM_Read(benchmark::State& state) {
  const auto& f = fixture();
  for (auto _ : state) {
    auto s = snap::read_snapshot_any(f.path);
    benchmark::DoNotOptimize(s.device_traces.data());
  }
  set_counters(state);
}

void BM_Report(benchmark::State& state) {
  const auto s = snap::read_snapshot_any(fixture().path);
  NullBuf buf;
  std::ostream null(&buf);
  for (auto _ : state) {
    const analysis::SiteTable sites(s);
    const auto r = analysis::build_report(s, sites, "bench.json");
    analysis::print_report_text(r, s, sites, {}, null);
  }
  set_counters(state);
}

void BM_Check(benchmark::State& state) {
  std::vector<analysis::LoadedSnapshot> snaps{
      {"bench.json", snap::read_snapshot_any(fixture().path)}};
  NullBuf buf;
  std::ostream null(&buf);
  const auto o = check_options();
  for (auto _ : state) benchmark::DoNotOptimize(analysis::run_check(snaps, o, null, null));
  set_counters(state);
}

// What `cumemtrace report FILE` plus `cumemtrace check FILE` cost together, file to verdict.
void BM_ReadReportCheck(benchmark::State& state) {
  NullBuf buf;
  std::ostream null(&buf);
  const auto o = check_options();
  for (auto _ : state) {
    std::vector<analysis::LoadedSnapshot> snaps{
        {"bench.json", snap::read_snapshot_any(fixture().path)}};
    const auto& s = snaps[0].snapshot;
    const analysis::SiteTable sites(s);
    analysis::print_report_text(analysis::build_report(s, sites, "bench.json"), s, sites, {}, null);
    benchmark::DoNotOptimize(analysis::run_check(snaps, o, null, null));
  }
  set_counters(state);
}

}  // namespace

BENCHMARK(BM_Read)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_Report)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_Check)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_ReadReportCheck)->Unit(benchmark::kMillisecond)->Iterations(3);

// `bench_analysis --write-snapshot=PATH` writes the synthetic snapshot and exits, so the CLI can
// be timed on it (bench/run_benchmarks.sh does: `cumemtrace report` and `cumemtrace check`).
int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a.rfind("--write-snapshot=", 0) == 0) {
      std::string path(a.substr(17));
      std::filesystem::remove(path);
      snap::write_snapshot_file(generate(events_wanted()), path);
      return 0;
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
