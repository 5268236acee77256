// One analysed view per snapshot (analysis/analysed_snapshot.h, issue 55 item 5): report, check and
// diff replay each device of a snapshot once, whatever views they build from it (the ledger, the
// by-module view, the OOM verdicts, the limits). Counted with DeviceReplay::built() around the
// library calls each command makes: a second replay of a device anywhere in them fails the count.
#include <catch2/catch.hpp>

#include <sstream>

#include "analysis/analysed_snapshot.h"
#include "analysis/frames.h"
#include "analysis/model.h"
#include "io/snapshot_input.h"
#include "pytorch/categories.h"
#include "pytorch/phases.h"
#include "pytorch/whatif.h"
#include "support/torch_fixture.h"
#include "support/torch_oom_snapshot.h"
#include "verdicts/check.h"
#include "verdicts/diff.h"
#include "verdicts/process_summary.h"
#include "verdicts/report.h"

using namespace cumemtrace;
using namespace cumemtrace::analysis;

namespace {

// A PyTorch run with automatic phases and an OOM on device 0: report builds its ledger, its OOM
// verdict and its device rows from it, each of which used to replay the device on its own.
snap::Snapshot oom_run() {
  snap::Snapshot s = testing::training_oom_snapshot();
  label_categories(s);
  return s;
}

// PyTorch's own recorded fixture, read as every command reads it (its blocks labelled).
snap::Snapshot torch_fixture() {
  snap::Snapshot s = snap::read_snapshot_any(testing::kTorchPickle);
  label_block_sizes(s);
  return s;
}

template <typename F>
uint64_t replays_of(F&& f) {
  const uint64_t before = DeviceReplay::built();
  f();
  return DeviceReplay::built() - before;
}

// Phases built while `f` runs (pytorch/phases.h phases_of: one per analysed view).
template <typename F>
uint64_t phases_of_call(F&& f) {
  const uint64_t before = Phases::built();
  f();
  return Phases::built() - before;
}

}  // namespace

TEST_CASE("report replays each device of a snapshot once") {
  for (const auto& s : {oom_run(), torch_fixture()}) {
    const int devices = device_count(s);
    REQUIRE(devices >= 1);
    const uint64_t n = replays_of([&] {
      const AnalysedSnapshot view(s);
      const SiteTable sites(s);
      const Report r = build_report(view, sites, "x.json");
      std::ostringstream text, json;
      print_report_text(r, s, sites, {}, text);
      print_report_json(r, s, sites, {}, json);
    });
    CHECK(n == static_cast<uint64_t>(devices));
  }
  // The OOM run's report holds what each view made of the one replay.
  const snap::Snapshot s = oom_run();
  const Report r = build_report(s, SiteTable(s), "x.json");
  CHECK(r.ooms.size() == 1);
  CHECK(r.ledger.has_value());
}

TEST_CASE("check replays each device of a snapshot once, whatever limits it judges") {
  snap::Snapshot s = oom_run();
  s.tool->reason = "exit";  // written at the end: every limit is judged here
  CheckOptions o;
  o.max_leaked_bytes = 1ull << 40;
  o.max_peak_bytes = 1ull << 40;
  o.max_allocated_peak = 1ull << 40;
  o.max_reserved_peak = 1ull << 40;
  o.max_growth = 1ull << 40;
  o.max_growth_per_step = 1ull << 40;
  std::vector<LoadedSnapshot> in;
  in.emplace_back("x.json", s);
  std::ostringstream out, err;
  int rc = -1;
  const uint64_t n = replays_of([&] { rc = run_check(in, o, out, err); });
  // Every limit was judged (the two growth limits fail: one complete step is too few to judge).
  INFO(out.str());
  CHECK(rc == 1);
  CHECK(out.str().find("x.json: FAILED: 2 of 7 checks failed") != std::string::npos);
  CHECK(n == static_cast<uint64_t>(device_count(s)));
}

TEST_CASE("diff replays each device of each side once") {
  const snap::Snapshot a = oom_run(), b = torch_fixture();
  const uint64_t n = replays_of([&] {
    const Diff d = diff_snapshots(a, "a.json", b, "b.json");
    std::ostringstream out;
    print_diff_text(d, 10, out);
  });
  CHECK(n == static_cast<uint64_t>(device_count(a) + device_count(b)));
}

TEST_CASE("an analysed view builds a device's replay on first use and keeps it") {
  const snap::Snapshot s = oom_run();
  const AnalysedSnapshot view(s);
  const uint64_t before = DeviceReplay::built();
  const DeviceReplay& first = view.replay(0);
  CHECK(DeviceReplay::built() == before + 1);
  CHECK(&view.replay(0) == &first);
  CHECK(DeviceReplay::built() == before + 1);
  CHECK(view.devices() == device_count(s));
}

TEST_CASE("report, check and diff build a snapshot's phases once") {
  // The OOM run has automatic phases: the ledger, the by-module view, the OOM verdicts and
  // check's growth all read them.
  const snap::Snapshot s = oom_run();
  CHECK(phases_of_call([&] {
          const AnalysedSnapshot view(s);
          const SiteTable sites(s);
          const Report r = build_report(view, sites, "x.json");
          std::ostringstream text;
          print_report_text(r, s, sites, {}, text);
        }) == 1);
  snap::Snapshot ended = oom_run();
  ended.tool->reason = "exit";
  CheckOptions o;
  o.max_leaked_bytes = 1ull << 40;
  o.max_growth = 1ull << 40;
  o.max_growth_per_step = 1ull << 40;
  std::vector<LoadedSnapshot> in;
  in.emplace_back("x.json", ended);
  std::ostringstream out, err;
  CHECK(phases_of_call([&] { run_check(in, o, out, err); }) == 1);
  CHECK(phases_of_call([&] { diff_snapshots(s, "a.json", ended, "b.json"); }) == 2);
}

TEST_CASE("a process's report and its summary share one replay per device (report DIR, run)") {
  // report DIR without summaries and the collector at a process's end: the report, then the
  // summary's limit measures, from one view.
  for (const auto& s : {oom_run(), torch_fixture()}) {
    uint64_t phases = 0;
    const uint64_t n = replays_of([&] {
      phases = phases_of_call([&] {
        const AnalysedSnapshot view(s);
        const ProcessSummary p = summarize_snapshot(view, "");
        CHECK(p.devices.size() >= 1);
      });
    });
    CHECK(n == static_cast<uint64_t>(device_count(s)));
    CHECK(phases == (has_pytorch(s) ? 1u : 0u));  // the ledger asks for them
  }
}
