// Reads one snapshot file through the offline commands' input path (snapshot_input.h) and prints
// how long that took and what it held; bench/bench_read_formats.sh runs it under /usr/bin/time -v
// on the same data as JSON and as a pickle to compare time and peak memory.
#include <chrono>
#include <cstdio>

#include "io/snapshot_input.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s SNAPSHOT\n", argv[0]);
    return 2;
  }
  using namespace cumemtrace;
  const auto t0 = std::chrono::steady_clock::now();
  snap::Snapshot s;
  try {
    s = snap::read_snapshot_any(argv[1]);
  } catch (const snap::ReadError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  size_t entries = 0;
  for (const auto& tr : s.device_traces) entries += tr.size();
  std::printf("read %s: %.2f s, %zu trace entries, %zu segments, %zu stacks\n", argv[1], secs,
              entries, s.segments.size(), s.stacks.size());
  return 0;
}
