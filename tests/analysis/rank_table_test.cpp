// Many processes side by side (rank_table.h): the median, the flags (both thresholds), where a
// flagged rank first diverges (automatic steps, else time) and the lines that make the difference;
// diff's pairing of each rank's own device (diff.h); check over many files with an unreadable one.
#include <catch2/catch.hpp>

#include <sstream>

#include <nlohmann/json.hpp>

#include "analysis/check.h"
#include "analysis/diff.h"
#include "analysis/junit.h"
#include "analysis/rank_table.h"
#include "analysis/report.h"
#include "support/snapshot_builder.h"

using namespace cumemtrace;
using namespace cumemtrace::analysis;

namespace {

constexpr uint64_t MiB = 1 << 20;

void make_rank(testing::SnapshotBuilder& b, int rank, int world) {
  auto& t = b.tool();
  t.pid = 100 + rank;
  t.rank = {{"RANK", std::to_string(rank)},
            {"LOCAL_RANK", std::to_string(rank)},
            {"WORLD_SIZE", std::to_string(world)}};
}

// Rank r of 3 on its own device r: 1 GiB of weights, 4 automatic steps of a 100 MiB temporary;
// from step 3 on, `extra` bytes a step kept at cache (train.py:20).
snap::Snapshot ranked(int rank, uint64_t extra) {
  testing::SnapshotBuilder b(3);
  make_rank(b, rank, 3);
  const auto w = b.site("load_weights", "train.py", 5);
  const auto f = b.site("forward", "train.py", 10);
  const auto c = b.site("cache", "train.py", 20);
  b.alloc(0x10000000, 1024 * MiB, w, rank);
  for (uint64_t step = 0; step < 4; ++step) {
    b.alloc(0x80000000, 100 * MiB, f, rank);
    if (step >= 2 && extra) b.alloc(0xa0000000 + step * 0x10000000, extra, c, rank);
    b.free(0x80000000, rank);
    b.mark("auto:step", rank);
  }
  return b.finish();
}

// "r0.json", "r1.json"...: appended piece by piece, GCC 12 at -O3 (Release) warns a false
// -Wrestrict on "r" + std::string&&.
std::string rank_file(size_t i) {
  std::string name = "r";
  name += std::to_string(i);
  name += ".json";
  return name;
}

struct Job {
  std::vector<snap::Snapshot> snaps;
  std::vector<std::unique_ptr<SiteTable>> sites;
  std::vector<Report> reports;
  RankTable table;
  Job(std::vector<snap::Snapshot> s, RankThresholds t = {}) : snaps(std::move(s)) {
    std::vector<RankInput> in;
    for (size_t i = 0; i < snaps.size(); ++i) {
      sites.push_back(std::make_unique<SiteTable>(snaps[i]));
      reports.push_back(build_report(snaps[i], *sites[i], rank_file(i)));
    }
    for (size_t i = 0; i < snaps.size(); ++i) in.push_back({rank_file(i), &snaps[i], &reports[i]});
    table = build_rank_table(in, t);
  }
};

}  // namespace

TEST_CASE("rank table: rows by rank, each rank's own device, the median and its flag", "[ranks]") {
  // Given out of order: the table sorts by rank.
  Job job({ranked(2, 0), ranked(1, 80 * MiB), ranked(0, 0)});
  const RankTable& t = job.table;
  REQUIRE(t.rows.size() == 3);
  for (int r = 0; r < 3; ++r) {
    const auto& row = t.rows[static_cast<size_t>(r)];
    CHECK(t.processes[row.process].id.rank == r);
    CHECK(row.device == r);  // its own device ...
    CHECK(row.slot == 0);    // ... compared with the others' own
    // The report's own numbers, unchanged.
    CHECK(*row.values[0] == job.reports[static_cast<size_t>(2 - r)].devices[0].timeline.peak_bytes);
  }
  CHECK(*t.rows[0].values[0] == 1124 * MiB);
  CHECK(*t.rows[1].values[0] == 1284 * MiB);  // 1 GiB + 2 x 80 MiB kept + the temporary
  CHECK(*t.medians[0][0] == 1124 * MiB);
  CHECK(t.rows[0].flagged.empty());
  CHECK(t.rows[2].flagged.empty());
  REQUIRE(t.rows[1].flagged == std::vector<size_t>{0});
  CHECK(t.processes[t.rows[1].process].name == "rank 1/3 (local 1) on ci");
  REQUIRE(t.rows[1].median_row == size_t{0});  // rank 0: the first of the tied median peaks

  // After step 3 it keeps 80 MiB more: over 64 MiB but under 10% of 1 GiB, so not yet; after
  // step 4, 160 MiB: over both.
  REQUIRE(t.rows[1].divergence);
  CHECK(t.rows[1].divergence->step == 4);
  CHECK(t.rows[1].divergence->bytes == 1184 * MiB);
  CHECK(t.rows[1].divergence->median_bytes == 1024 * MiB);

  // The line that makes the difference, at each one's peak.
  REQUIRE(t.rows[1].lines.size() == 1);
  CHECK(t.rows[1].lines[0].site == "cache (train.py:20)");
  CHECK(t.rows[1].lines[0].bytes == static_cast<int64_t>(160 * MiB));
  CHECK(t.rows[1].lines[0].median_bytes == 0);

  std::ostringstream text;
  print_rank_table_text(t, 10, text);
  INFO(text.str());
  CHECK(text.str().find("rank 1/3 (local 1) on ci  cuda:1") != std::string::npos);
  CHECK(text.str().find("1.25 GiB *") != std::string::npos);
  CHECK(text.str().find("peak 1.25 GiB: +160 MiB (+14.2%) from the median 1.10 GiB") !=
        std::string::npos);
  CHECK(text.str().find("first diverges at the end of step 4") != std::string::npos);
  CHECK(text.str().find("+160 MiB  cache (train.py:20)") != std::string::npos);
  const auto j = rank_table_json(t, 10);
  CHECK(j["rows"][1]["flagged"] == nlohmann::json::array({"peak"}));
  CHECK(j["rows"][1]["values"]["peak"] == 1284 * MiB);
  CHECK(j["rows"][1]["divergence"]["step"] == 4);
  CHECK(j["rows"][1]["lines"][0]["change_bytes"] == 160 * MiB);
}

TEST_CASE("rank table: a difference over only one threshold is not flagged", "[ranks]") {
  // 80 MiB more: over 64 MiB, under 10% of 1.1 GiB.
  Job job({ranked(0, 0), ranked(1, 40 * MiB)});
  for (const auto& r : job.table.rows) CHECK(r.flagged.empty());
  // With a lower share it is, and the two-row median is the lower row.
  Job strict({ranked(0, 0), ranked(1, 40 * MiB)}, {0.05, 64 * MiB});
  CHECK(strict.table.rows[0].flagged.empty());
  CHECK(strict.table.rows[1].flagged == std::vector<size_t>{0});
}

TEST_CASE("rank table: without automatic steps, the moment since each process's start", "[ranks]") {
  auto one = [](int rank, bool skew) {
    testing::SnapshotBuilder b(2);
    make_rank(b, rank, 2);
    b.alloc(0x10000000, 1024 * MiB, b.site("load", "app.cpp", 3), rank);
    if (skew) b.alloc(0x90000000, 200 * MiB, b.site("extra", "app.cpp", 9), rank);
    return b.finish();
  };
  Job job({one(0, false), one(1, true)});
  const auto& row = job.table.rows[1];
  REQUIRE(row.flagged == std::vector<size_t>{0});
  REQUIRE(row.divergence);
  CHECK_FALSE(row.divergence->step);
  CHECK(row.divergence->since_start_us == 20);  // its second allocation, 20 µs after its start
  CHECK(row.divergence->bytes == 1224 * MiB);
  CHECK(row.divergence->median_bytes == 1024 * MiB);
  REQUIRE(row.lines.size() == 1);
  CHECK(row.lines[0].site == "extra (app.cpp:9)");
}

TEST_CASE("diff: each rank's own device is compared with the other's", "[diff][ranks]") {
  auto one = [](int rank, uint64_t extra) {
    testing::SnapshotBuilder b(2);
    make_rank(b, rank, 2);
    b.alloc(0x10000000, 1024 * MiB, b.site("load", "app.cpp", 3), rank);
    if (extra) b.alloc(0x90000000, extra, b.site("extra", "app.cpp", 9), rank);
    return b.finish();
  };
  const auto d = diff_snapshots(one(0, 0), "rank0.json", one(1, MiB), "rank1.json");
  REQUIRE(d.devices.size() == 1);
  CHECK(d.devices[0].base_device == 0);
  CHECK(d.devices[0].new_device == 1);
  CHECK(d.devices[0].label == "rank 0 cuda:0 vs rank 1 cuda:1");
  CHECK(d.devices[0].base_peak == 1024 * MiB);
  CHECK(d.devices[0].new_peak == 1025 * MiB);
  REQUIRE(d.sites.size() == 1);  // the skew alone, not every byte twice
  CHECK(d.sites[0].site == "extra (app.cpp:9)");
  CHECK(d.sites[0].new_live == MiB);
  std::ostringstream text;
  print_diff_text(d, 10, text);
  CHECK(text.str().find("\nrank 0 cuda:0 vs rank 1 cuda:1\n  peak:         1.00 GiB -> 1.00 GiB  "
                        "+1.00 MiB (+0.1%)") != std::string::npos);
  CHECK(text.str().find("  rank 0 cuda:0 vs rank 1 cuda:1: extra (app.cpp:9)") !=
        std::string::npos);
}

TEST_CASE("a rank that touched device 0 first is still paired by its own device", "[diff][ranks]") {
  // As on the H200 host: rank 1's NCCL start-up made (and freed) 2 MiB on device 0 before rank 1
  // used its own device 1. Pairing by first use compared rank 0's cuda:0 with rank 1's cuda:0.
  auto one = [](int rank, bool probe) {
    testing::SnapshotBuilder b(2);
    make_rank(b, rank, 2);
    if (probe) {
      b.alloc(0x5000000, 2 * MiB, b.site("probe", "nccl.cpp", 1), 0);
      b.free(0x5000000, 0);
    }
    b.alloc(0x10000000, 1024 * MiB, b.site("load", "app.cpp", 3), rank);
    return b.finish();
  };
  const auto d = diff_snapshots(one(0, false), "rank0.json", one(1, true), "rank1.json");
  REQUIRE(d.devices.size() == 2);
  CHECK(d.devices[0].label == "rank 0 cuda:0 vs rank 1 cuda:1");
  CHECK(d.devices[0].new_peak == 1024 * MiB);
  CHECK(d.devices[1].label == "rank 0 (no device) vs rank 1 cuda:0");
  Job job({one(0, false), one(1, true)});
  REQUIRE(job.table.rows.size() == 3);
  CHECK((job.table.rows[1].device == 1 && job.table.rows[1].slot == 0));
  CHECK((job.table.rows[2].device == 0 && job.table.rows[2].slot == 1));
  CHECK(job.table.rows[1].flagged.empty());  // 1 GiB each on their own devices: no skew
}

TEST_CASE("check over many files: one verdict each, one for the job, an unreadable one failed",
          "[check][ranks]") {
  testing::SnapshotBuilder b(2);
  make_rank(b, 1, 2);
  b.alloc(0x10000000, 3 * MiB, b.site("keep", "app.cpp", 3), 1);
  // A clean run that used CUDA: it allocated and freed everything.
  testing::SnapshotBuilder clean;
  clean.alloc(0x20000000, MiB, clean.site("step", "app.cpp", 9));
  clean.free(0x20000000);
  CheckOptions o;
  o.max_leaked_bytes = 2 * MiB;
  std::ostringstream out, err;
  const int rc = run_check({{"rank1.json", b.finish()},
                            {"bad.json", {}, "bad.json:offset 0: invalid JSON"},
                            {"clean.json", clean.finish()}},
                           o, out, err);
  CHECK(rc == 2);  // an unreadable input outranks a failed limit
  const std::string s = out.str();
  CHECK(s.find("rank1.json (rank 1/2 (local 1) on ci): error: 3.00 MiB leaked on device 1") !=
        std::string::npos);
  CHECK(s.find("bad.json: error: unreadable, not checked: offset 0: invalid JSON\n") !=
        std::string::npos);
  CHECK(s.find("rank1.json (rank 1/2 (local 1) on ci): FAILED: 1 of 3 checks failed\n") !=
        std::string::npos);
  CHECK(s.find("bad.json: FAILED: 1 of 1 check failed\n") != std::string::npos);
  CHECK(s.find("clean.json: ok: 2 checks passed\n") != std::string::npos);
  CHECK(s.find("job: FAILED (2 of 3 files): rank1.json (rank 1/2 (local 1) on ci); "
               "bad.json\n") != std::string::npos);
  const CheckResult r = evaluate_check({{"bad.json", {}, "bad.json: cannot open"}}, o);
  std::ostringstream junit;
  write_junit(r, junit);
  CHECK(junit.str().find("name=\"readable\" file=\"bad.json\">\n      <failure "
                         "message=\"unreadable, not checked: cannot open\"") != std::string::npos);
}
