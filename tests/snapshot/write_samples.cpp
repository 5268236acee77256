// Writes the sample snapshots as JSON (the cumemtrace writer) and as pickles, side by side, for
// check_pickle.py to compare with Python's own unpickler: `write_samples OUTDIR`.
#include <cstdio>
#include <fstream>
#include <string>

#include "snapshot/pickle_writer.h"
#include "snapshot/snapshot_json_writer.h"
#include "support/sample_snapshots.h"

using namespace cumemtrace;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_samples OUTDIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  const std::pair<const char*, snap::Snapshot> samples[] = {
      {"leak", viz::testing::leak_snapshot()},
      {"busy", viz::testing::busy_snapshot(6000, 300)},
      {"empty", snap::Snapshot{}},
  };
  for (const auto& [name, s] : samples) {
    std::ofstream(dir + "/" + name + ".json", std::ios::binary) << snap::to_json(s);
    std::ofstream(dir + "/" + name + ".pickle", std::ios::binary) << snap::to_pickle(s);
  }
  return 0;
}
