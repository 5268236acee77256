// Many processes side by side (rank_table.h): the median, the flags (both thresholds), where a
// flagged rank first diverges (automatic steps, else time) and the lines that make the difference;
// diff's pairing of each rank's own device (diff.h); check over many files with an unreadable one.
#include <catch2/catch.hpp>

#include <sstream>

#include <nlohmann/json.hpp>

#include "pytorch/phases.h"
#include "support/snapshot_builder.h"
#include "verdicts/check.h"
#include "verdicts/diff.h"
#include "verdicts/junit.h"
#include "verdicts/process_summary.h"
#include "verdicts/rank_table.h"
#include "verdicts/report.h"

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
  std::vector<ProcessSummary> summaries;
  RankTable table;
  Job(std::vector<snap::Snapshot> s, RankThresholds t = {}) : snaps(std::move(s)) {
    std::vector<RankInput> in;
    for (size_t i = 0; i < snaps.size(); ++i) {
      sites.push_back(std::make_unique<SiteTable>(snaps[i]));
      reports.push_back(build_report(snaps[i], *sites[i], rank_file(i)));
      summaries.push_back(summarize_process(snaps[i], reports[i], {}));
    }
    for (size_t i = 0; i < snaps.size(); ++i)
      in.push_back({rank_file(i), &summaries[i], in_memory(snaps[i]), &reports[i]});
    table = build_rank_table(in, t);
  }
};

// The same job as `report DIR` holds it from the summaries' files: each summary written as JSON
// and read back, the full snapshot read again through `load` (counted) where the table needs it.
struct LightJob {
  std::vector<ProcessSummary> summaries;
  size_t loads = 0;
  RankTable table;
  explicit LightJob(Job& full, RankThresholds t = {}) {
    for (const auto& p : full.summaries)
      summaries.push_back(summary_from_json(nlohmann::json::parse(summary_json(p).dump())));
    std::vector<RankInput> in;
    for (size_t i = 0; i < summaries.size(); ++i)
      in.push_back({rank_file(i), &summaries[i], from_file([this, &full, i] {
                      ++loads;
                      return full.snaps[i];
                    })});
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
    CHECK(*row.values[0] ==
          job.reports[static_cast<size_t>(2 - r)].devices[0].timeline.trace.bytes);
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

TEST_CASE("rank table: flagged only when MORE than both thresholds apart", "[ranks]") {
  // Off by one at either boundary flags a rank exactly 64 MiB (or exactly the share) apart.
  auto one = [](int rank, uint64_t extra) {
    testing::SnapshotBuilder b(2);
    make_rank(b, rank, 2);
    b.alloc(0x10000000, 1024 * MiB, b.site("load", "app.cpp", 3), rank);
    if (extra) b.alloc(0x90000000, extra, b.site("extra", "app.cpp", 9), rank);
    return b.finish();
  };
  auto flagged = [&](uint64_t extra, RankThresholds t) {
    Job job({one(0, 0), one(1, extra)}, t);
    CHECK(job.table.rows[0].flagged.empty());  // the (lower) median itself
    return !job.table.rows[1].flagged.empty();
  };
  // The bytes threshold alone (no share): 64 MiB apart is not more than 64 MiB.
  CHECK_FALSE(flagged(64 * MiB, {0.0, 64 * MiB}));
  CHECK(flagged(64 * MiB + 1, {0.0, 64 * MiB}));
  // The share alone: 1/16 of the 1 GiB median is 64 MiB.
  CHECK_FALSE(flagged(64 * MiB, {1.0 / 16, 0}));
  CHECK(flagged(64 * MiB + 1, {1.0 / 16, 0}));
  // The defaults: 10% of 1 GiB is 102.4 MiB, the larger of the two.
  CHECK_FALSE(flagged(102 * MiB, {}));
  CHECK(flagged(103 * MiB, {}));
}

TEST_CASE("rank table: the job's first OOM, the OOMs and live at exit per row", "[ranks][oom]") {
  // Both ranks run out of memory; rank 1 first (its clock: 20 µs after its start, rank 0's at
  // 40 µs), while rank 0 held 150 MiB.
  testing::SnapshotBuilder b0(1), b1(1);
  make_rank(b0, 0, 2);
  make_rank(b1, 1, 2);
  const auto s0 = b0.site("grow", "train.py", 7);
  b0.alloc(0x10000000, 100 * MiB, s0);
  b0.alloc(0x20000000, 50 * MiB, s0);
  b0.alloc(0x30000000, 30 * MiB, s0);
  b0.oom(1024 * MiB, s0);
  b1.alloc(0x10000000, 200 * MiB, b1.site("load", "train.py", 3));
  b1.oom(1024 * MiB, b1.site("big", "train.py", 12));
  Job job({b0.finish(), b1.finish()});
  const RankTable& t = job.table;
  REQUIRE(t.first_oom);
  const JobOom& o = *t.first_oom;
  CHECK(o.name == "rank 1/2 (local 1) on ci");
  CHECK(o.file == "r1.json");
  CHECK(o.since_start_us == 20);
  CHECK(o.oom.verdict == "exhaustion");
  CHECK(o.oom.site == "big (train.py:12)");
  CHECK(o.ooms == 2);
  CHECK(o.processes_with_oom == 2);
  REQUIRE(o.others.size() == 1);
  CHECK(o.others[0].name == "rank 0/2 (local 0) on ci");
  CHECK(o.others[0].bytes == 150 * MiB);  // not the 180 MiB it held at its own OOM
  REQUIRE(t.rows.size() == 2);
  CHECK(t.rows[0].ooms == 1);
  CHECK(t.rows[0].live_at_exit == 180 * MiB);
  CHECK(t.rows[1].ooms == 1);
  CHECK(t.rows[1].live_at_exit == 200 * MiB);

  std::ostringstream text;
  print_rank_table_text(t, 10, text);
  INFO(text.str());
  CHECK(text.str().find("\nFirst OOM of the job (the first of 2 OOMs in 2 processes): rank 1/2 "
                        "(local 1) on ci (pid 101) on cuda:0 at +0.000020 s since the job's "
                        "start: exhaustion: 1.00 GiB requested,") != std::string::npos);
  CHECK(text.str().find("\n  the request: 1.00 GiB at big (train.py:12)\n  the other processes "
                        "then:\n    rank 0/2 (local 0) on ci cuda:0: held 150 MiB\n") !=
        std::string::npos);
  const auto j = rank_table_json(t, 10);
  CHECK(j["first_oom"]["process"] == "rank 1/2 (local 1) on ci");
  CHECK(j["first_oom"]["others"][0]["bytes"] == 150 * MiB);
  CHECK(j["rows"][0]["ooms"] == 1);
  CHECK(j["rows"][1]["live_at_exit_bytes"] == 200 * MiB);

  // Without an OOM: none, and no OOMs column.
  Job calm({ranked(0, 0), ranked(1, 0)});
  CHECK_FALSE(calm.table.first_oom);
  std::ostringstream calm_text;
  print_rank_table_text(calm.table, 10, calm_text);
  CHECK(calm_text.str().find("OOM") == std::string::npos);
  CHECK(calm_text.str().find("live at exit") != std::string::npos);
}

TEST_CASE("rank table: two jobs in one folder are said and told apart", "[ranks]") {
  auto one = [](int rank, const std::string& job) {
    testing::SnapshotBuilder b(1);
    make_rank(b, rank, 2);
    b.tool().pid = 100 + rank + (job == "b" ? 50 : 0);
    if (!job.empty()) b.tool().rank["TORCHELASTIC_RUN_ID"] = job;
    b.alloc(0x10000000, 10 * MiB, b.site("load", "app.py", 3));
    return b.finish();
  };
  // Two ids: each row is named with its job, the rows grouped by job, then rank.
  Job two({one(1, "b"), one(0, "a"), one(0, "b"), one(1, "a")});
  CHECK(two.table.jobs == std::vector<std::string>{"a", "b"});
  CHECK(two.table.repeated_ranks.empty());
  std::vector<std::string> names;
  for (const auto& r : two.table.rows) names.push_back(two.table.processes[r.process].name);
  CHECK(names == std::vector<std::string>{
                     "rank 0/2 (local 0) on ci [job a]", "rank 1/2 (local 1) on ci [job a]",
                     "rank 0/2 (local 0) on ci [job b]", "rank 1/2 (local 1) on ci [job b]"});
  std::ostringstream text;
  print_rank_table_text(two.table, 10, text);
  CHECK(text.str().find("\nThis folder holds 2 jobs (a, b); each process is named with its "
                        "job.\n") != std::string::npos);
  // No ids, but rank 0 twice (two processes): two runs share the folder.
  auto again = one(0, "");
  again.tool->pid = 900;
  Job runs({one(0, ""), one(1, ""), std::move(again)});
  CHECK(runs.table.jobs.empty());
  CHECK(runs.table.repeated_ranks == std::vector<int>{0});
  std::ostringstream runs_text;
  print_rank_table_text(runs.table, 10, runs_text);
  CHECK(runs_text.str().find("\nRank 0 is claimed by more than one process of one job: two runs "
                             "share this folder") != std::string::npos);
  // One process's two images (it exec'd): one claim.
  Job images({one(0, ""), one(0, ""), one(1, "")});
  CHECK(images.table.repeated_ranks.empty());
  // One job: nothing said, names unchanged.
  Job single({one(0, "a"), one(1, "a")});
  std::ostringstream single_text;
  print_rank_table_text(single.table, 10, single_text);
  CHECK(single_text.str().find("folder") == std::string::npos);
  CHECK(single.table.processes[0].name == "rank 0/2 (local 0) on ci");
}

TEST_CASE("the job's first OOM in a large job: the processes that held most", "[ranks][oom]") {
  // Rank 3 runs out of memory; the others hold 10, 30 and 20 MiB. With room for two lines: ranks
  // 1 and 2, largest first, and the rest's total.
  std::vector<snap::Snapshot> snaps;
  const uint64_t held[] = {10, 30, 20};
  for (int r = 0; r < 4; ++r) {
    testing::SnapshotBuilder b(1);
    make_rank(b, r, 4);
    const auto s = b.site("step", "train.py", 9);
    if (r < 3) b.alloc(0x10000000, held[r] * MiB, s);
    if (r == 3) {
      b.alloc(0x10000000, MiB, s);
      b.alloc(0x20000000, MiB, s);  // after the others' allocations: its OOM is the last entry
      b.oom(1024 * MiB, s);
    }
    snaps.push_back(b.finish());
  }
  Job job(std::move(snaps));
  REQUIRE(job.table.first_oom);
  const auto lines = job_oom_lines(*job.table.first_oom, 2);
  REQUIRE(lines.size() == 5);
  CHECK(lines[2] ==
        "  the other processes then (the 2 that held most of 3; the rest held "
        "10.0 MiB in total):");
  CHECK(lines[3] == "    rank 1/4 (local 1) on ci cuda:0: held 30.0 MiB");
  CHECK(lines[4] == "    rank 2/4 (local 2) on ci cuda:0: held 20.0 MiB");
  // Room for all: rank order.
  const auto all = job_oom_lines(*job.table.first_oom, 10);
  REQUIRE(all.size() == 6);
  CHECK(all[2] == "  the other processes then:");
  CHECK(all[3] == "    rank 0/4 (local 0) on ci cuda:0: held 10.0 MiB");
}

TEST_CASE("rank table: the same from tool sections, reading snapshots only where shown in detail",
          "[ranks]") {
  // The skewed rank: its snapshot and the median rank's, for where it diverges; no other.
  Job skew({ranked(2, 0), ranked(1, 80 * MiB), ranked(0, 0)});
  const uint64_t replays = DeviceReplay::built(), phases = Phases::built();
  LightJob light(skew);
  CHECK(rank_table_json(light.table, 10) == rank_table_json(skew.table, 10));
  CHECK(light.loads == 2);
  // Each snapshot read is analysed once: its 3 devices replayed once for its report and where it
  // diverges, its phases built once (analysis/analysed_snapshot.h).
  CHECK(DeviceReplay::built() - replays == 2 * 3);
  CHECK(Phases::built() - phases == 2);
  // Nothing flagged: none.
  Job calm({ranked(0, 0), ranked(1, 0), ranked(2, 0)});
  LightJob calm_light(calm);
  CHECK(rank_table_json(calm_light.table, 10) == rank_table_json(calm.table, 10));
  CHECK(calm_light.loads == 0);
  // A job's OOM: every other process (what it held then); the OOM's own line is in its summary.
  testing::SnapshotBuilder b0(1), b1(1);
  make_rank(b0, 0, 2);
  make_rank(b1, 1, 2);
  b0.alloc(0x10000000, 190 * MiB, b0.site("grow", "train.py", 7));  // not flagged: 10 MiB apart
  b1.alloc(0x10000000, 200 * MiB, b1.site("load", "train.py", 3));
  b1.oom(1024 * MiB, b1.site("big", "train.py", 12));
  Job oom({b0.finish(), b1.finish()});
  for (const auto& r : oom.table.rows) CHECK(r.flagged.empty());
  LightJob oom_light(oom);
  CHECK(rank_table_json(oom_light.table, 10) == rank_table_json(oom.table, 10));
  CHECK(oom_light.table.first_oom->oom.site == "big (train.py:12)");
  CHECK(oom_light.loads == 1);
}
