// Benchmarks of the recording and collecting path without a GPU: the producer's publish (one
// and many threads, with a consumer draining concurrently as in real runs), the collector's drain
// into its model, snapshot JSON writing, and the collector's memory per live allocation and per
// retained trace entry. Run: build/bin/bench_collector (bench/run_benchmarks.sh prints the table).
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <new>
#include <thread>

#include "core/ring_producer.h"
#include "live/ring_reader.h"
#include "live/trace_model.h"
#include "snapshot/snapshot_json_writer.h"
#include "support/memfd_ring.h"

using namespace cumemtrace;

namespace {

// The default producer wait is irrelevant here: the consumer always drains.
struct Ring : testing::MemfdRing {
  explicit Ring(uint64_t capacity) : MemfdRing(capacity, 10'000'000'000ull) {}
};

wire::EventPayload alloc_event(uint64_t i) {
  wire::EventPayload ev{};
  ev.kind = (i & 1) ? wire::Kind::kFree : wire::Kind::kAlloc;
  ev.api = wire::Api::kMemAlloc;
  ev.addr = 0x7f0000000000ull + ((i >> 1) % 4096) * 4096;
  ev.size = 4096;
  ev.tid = 1;
  return ev;
}

// The default ring (8 MiB) with a consumer thread draining like the collector does.
Ring* g_ring = nullptr;
std::atomic<bool> g_stop{false};
std::thread g_consumer;

void start_consumer() {
  g_ring = new Ring(uint64_t{1} << 17);
  g_stop = false;
  g_consumer = std::thread([] {
    collect::RingReader reader(dup(g_ring->fd));
    while (!g_stop.load(std::memory_order_relaxed)) {
      if (!reader.drain([](const collect::Record&) {})) std::this_thread::yield();
    }
    reader.drain([](const collect::Record&) {});
  });
}

void stop_consumer() {
  g_stop = true;
  g_consumer.join();
  delete g_ring;
  g_ring = nullptr;
}

void BM_Publish(benchmark::State& state) {
  if (state.thread_index() == 0) start_consumer();
  const unsigned depth = static_cast<unsigned>(state.range(0));
  uint64_t frames[32];
  for (unsigned i = 0; i < 32; ++i) frames[i] = 0x400000 + i * 64;
  uint64_t i = static_cast<uint64_t>(state.thread_index()) << 40;
  for (auto _ : state) {
    auto ev = alloc_event(i++);
    ev.nframes = static_cast<uint8_t>(depth);
    g_ring->producer.publish(ev, frames, depth * 8u);
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    state.counters["dropped"] = static_cast<double>(g_ring->hdr->dropped.load());
    stop_consumer();
  }
}
BENCHMARK(BM_Publish)->Arg(0)->Arg(32)->Threads(1)->Threads(16)->UseRealTime();

// Collector: drain records into the model (alloc/free pairs, N-frame stacks from 64 call sites;
// 0: stacks off, the pool-hit pattern whose rate bounds a traced pool-hit loop).
void BM_DrainIntoModel(benchmark::State& state) {
  const uint64_t n = 1 << 20;
  const unsigned depth = static_cast<unsigned>(state.range(0));
  for (auto _ : state) {
    state.PauseTiming();
    Ring ring(uint64_t{1} << 23);
    uint64_t frames[8];
    for (uint64_t i = 0; i < n; ++i) {
      for (unsigned f = 0; f < depth; ++f) frames[f] = 0x400000 + ((i >> 1) % 64) * 256 + f;
      auto ev = alloc_event(i);
      ev.nframes = static_cast<uint8_t>(depth);
      ring.producer.publish(ev, frames, depth * 8u);
    }
    collect::RingReader reader(dup(ring.fd));
    collect::TraceModel model(0, 0, 0);
    state.ResumeTiming();
    reader.drain([&](const collect::Record& r) { model.add(r); });
    benchmark::DoNotOptimize(model.events_total());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_DrainIntoModel)->Arg(8)->Arg(0)->Unit(benchmark::kMillisecond)->Iterations(3);

// 1 M events (500 k allocations and frees) built into a snapshot and written as JSON.
void BM_WriteJson1M(benchmark::State& state) {
  collect::TraceModel model(1'700'000'000'000'000'000ull, 0, 0);
  collect::Record r;
  for (uint64_t i = 0; i < 1'000'000; ++i) {
    r.ev = alloc_event(i);
    r.ev.time_ns = i * 1000;
    r.frames.assign({0x400000 + (i >> 1) % 64 * 256, 0x400100});
    model.add(r);
  }
  collect::Symbolizer sym;
  const auto path = std::filesystem::temp_directory_path() / "bench_collector.json";
  for (auto _ : state) {
    std::filesystem::remove(path);
    auto snap = model.build(collect::ProcessInfo{1, 0, "/bin/bench", {}, {}, "h"}, sym);
    snap::write_snapshot_file(snap, path.string());
  }
  state.counters["file_MiB"] = static_cast<double>(std::filesystem::file_size(path)) / (1 << 20);
  std::filesystem::remove(path);
}
BENCHMARK(BM_WriteJson1M)->Unit(benchmark::kMillisecond)->Iterations(3);

// Collector memory: heap bytes per live allocation (trace bounded to one entry) and per retained
// trace entry (the same run unbounded; each allocation adds two entries).
size_t heap_for(uint64_t n, uint64_t max_trace) {
  const size_t before = mallinfo2().uordblks;
  auto* model = new collect::TraceModel(0, 0, max_trace);
  collect::Record r;
  for (uint64_t i = 0; i < n; ++i) {
    r.ev = wire::EventPayload{};
    r.ev.kind = wire::Kind::kAlloc;
    r.ev.addr = 0x7f0000000000ull + i * 4096;
    r.ev.size = 4096;
    r.frames.assign({0x400000 + i % 64});
    model->add(r);
  }
  const size_t used = mallinfo2().uordblks - before;
  delete model;
  return used;
}

void BM_CollectorMemory(benchmark::State& state) {
  const uint64_t n = 1'000'000;
  for (auto _ : state) {
    const double live_only = static_cast<double>(heap_for(n, 1));
    const double with_trace = static_cast<double>(heap_for(n, 0));
    state.counters["bytes_per_live_allocation"] = live_only / n;
    state.counters["bytes_per_trace_entry"] = (with_trace - live_only) / (2.0 * n);
  }
}
BENCHMARK(BM_CollectorMemory)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
