// Writes the scenario snapshots used by the CLI tests and as the fuzz seed corpus:
//   make_test_snapshots DIR  ->  DIR/{clean,leak,growth,steady,drops,anomaly,twodev,labelled}.json
//   and DIR/labelled.pickle (the same snapshot as a pickle: a seed of the pickle reader's fuzzer)
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "snapshot/pickle_writer.h"
#include "snapshot/snapshot_json_writer.h"
#include "support/snapshot_builder.h"

using cumemtrace::testing::SnapshotBuilder;
namespace snap = cumemtrace::snap;

namespace {

constexpr uint64_t MiB = 1 << 20;

void write(const std::filesystem::path& dir, const char* name, const snap::Snapshot& s) {
  const auto p = dir / name;
  std::filesystem::remove(p);
  snap::write_snapshot_file(s, p.string());
}

snap::Snapshot growth(uint64_t per_step) {
  SnapshotBuilder b;
  const auto g = b.site("grow_cache", "src/cache.cpp", 10);
  const auto t = b.site("step_scratch", "src/train.cpp", 20);
  for (uint64_t i = 0; i < 5; ++i) {
    b.mark("step");
    b.alloc(0x1000000 * (i + 1), 4 * MiB, t);
    if (per_step) b.alloc(0x80000000 + 0x1000000 * i, per_step, g);
    b.free(0x1000000 * (i + 1));
  }
  b.mark("step");
  return b.finish();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_test_snapshots DIR\n");
    return 2;
  }
  try {
    const std::filesystem::path dir = argv[1];
    std::filesystem::create_directories(dir);
    {
      SnapshotBuilder b;
      const auto w = b.site("allocate_weights", "tests/programs/scenarios.cpp", 42);
      b.alloc(0x10000000, 2 * MiB, w);
      b.free(0x10000000);
      write(dir, "clean.json", b.finish());
    }
    {
      SnapshotBuilder b;
      const auto w = b.site("allocate_weights", "tests/programs/scenarios.cpp", 42);
      const auto t = b.site("scratch", "tests/programs/scenarios.cpp", 60);
      b.alloc(0x10000000, 2 * MiB, w);
      b.alloc(0x20000000, 1 * MiB, t);
      b.free(0x20000000);
      write(dir, "leak.json", b.finish());
    }
    write(dir, "growth.json", growth(MiB));
    write(dir, "steady.json", growth(0));
    {
      SnapshotBuilder b;
      b.alloc(0x1000, 4096, b.site("f", "a.cpp", 1));
      b.free(0x1000);
      b.drops(5);
      write(dir, "drops.json", b.finish());
    }
    {
      SnapshotBuilder b;
      b.anomaly("double_free", 0xdead0000, b.site("release_twice", "a.cpp", 9));
      write(dir, "anomaly.json", b.finish());
    }
    {
      SnapshotBuilder b(2);
      b.alloc(0x1000, 3 * MiB, b.site("on_gpu0", "multi.cu", 5), 0);
      b.alloc(0x1000, 5 * MiB, b.site("on_gpu1", "multi.cu", 9), 1);
      b.free(0x1000, 0);
      write(dir, "twodev.json", b.finish());
    }
    {
      // Categories on the trace entries (one of each name, "unknown" on a segment event) and
      // the automatic phases' ownership walks: the fields the readers must parse.
      SnapshotBuilder b;
      const auto p = b.site("init_weights", "model.py", 7);
      b.alloc(0x10000000, 2 * MiB, p);
      b.alloc(0x20000000, 1 * MiB, p);
      b.free(0x20000000);
      snap::Snapshot s = b.finish();
      auto& tr = s.device_traces.at(0);
      for (size_t i = 0; i < tr.size(); ++i)
        tr[i].category = static_cast<snap::Category>(1 + i % 9);
      tr[0].category = snap::Category::kUnknown;
      s.tool->ownership = {
          {s.tool->start_time_us + 1,
           snap::OwnerRole::kParameter,
           {{0x10000000, 2 * MiB}, {0x20000000, MiB}}},
          {s.tool->start_time_us + 2, snap::OwnerRole::kGradient, {}},
          {s.tool->start_time_us + 3, snap::OwnerRole::kOptimizerState, {{0x10000000, 4096}}}};
      write(dir, "labelled.json", s);
      std::ofstream pickle(dir / "labelled.pickle", std::ios::binary | std::ios::trunc);
      cumemtrace::snap::write_pickle(s, pickle);
      if (!pickle.flush()) throw std::runtime_error("cannot write labelled.pickle");
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "make_test_snapshots: %s\n", e.what());
    return 1;
  }
  return 0;
}
