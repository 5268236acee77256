// The ledger (ledger.h) of PyTorch runs built by hand, with exact bytes: per phase of the first
// and the steady step (each delta equal to allocated_after() at the span's boundaries), the peaks
// by category with the cache, other libraries and the context, growth per step of a loop that
// keeps each step's output, the leak rule, and a run too short to judge.
#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "pytorch/categories.h"
#include "pytorch/ledger.h"
#include "pytorch/whatif.h"
#include "support/torch_run_builder.h"
#include "verdicts/check.h"
#include "verdicts/diff.h"
#include "verdicts/process_summary.h"
#include "verdicts/report.h"

using namespace cumemtrace;
using namespace cumemtrace::analysis;
using snap::Category;
using testing::TorchRunBuilder;

namespace {

constexpr uint64_t MiB = 1 << 20;
constexpr int64_t iMiB = 1 << 20;

// A training loop of `steps` steps (each ended by auto:step), each starting at 1000 * (step + 1):
// parameters W1 4 MiB + W2 2 MiB (train.py:5) and cuBLAS's 8 MiB workspace before the loop; per
// step an input X 1 MiB (train.py:70, freed after the step), in forward an activation A 3 MiB
// (model.py:20) and a 1 MiB temporary, and, when `kept`, an output of `kept` bytes at train.py:76
// that the loop keeps; in backward the gradients G1 4 + G2 2 MiB (step 0, kept), A freed, a 1 MiB
// temporary; in the optimizer the state S1 8 + S2 4 MiB (step 0, kept) and a 1 MiB temporary.
snap::Snapshot training(int steps, uint64_t kept) {
  TorchRunBuilder b;
  const auto model_cuda = b.line("train.py", 5, "<module>");
  const auto batch = b.line("train.py", 70, "<module>");
  const auto keep = b.line("train.py", 76, "<module>");
  const auto layer = b.line("model.py", 20, "forward");
  const auto grad = b.line("train.py", 80, "<module>");
  const auto adam = b.line("adam.py", 178, "_init_group");
  const auto ag = TorchRunBuilder::kAutogradTid;
  b.segment(1, 0x100000000, 256 * MiB);
  b.library(5, 0x200000000, 8 * MiB, b.native("libcublasLt.so.12", "cublasLtMatmul"));
  b.alloc(10, 0x100000000, 4 * MiB, model_cuda);
  b.alloc(11, 0x100400000, 2 * MiB, model_cuda);
  b.walk(20, snap::OwnerRole::kParameter, {{0x100000000, 4 * MiB}, {0x100400000, 2 * MiB}});
  uint64_t kept_addr = 0x108000000;
  for (int k = 0; k < steps; ++k) {
    const int64_t t = 1000 * (k + 1);
    b.alloc(t, 0x100600000, 1 * MiB, batch);
    b.phase(t + 10, t + 100, "auto:forward");
    b.alloc(t + 20, 0x100700000, 3 * MiB, layer);
    b.alloc(t + 30, 0x100a00000, 1 * MiB, layer);
    b.free(t + 40, 0x100a00000);
    if (kept) {
      b.alloc(t + 50, kept_addr, kept, keep);
      kept_addr += kept;
    }
    b.phase(t + 110, t + 200, "auto:backward");
    if (k == 0) {
      b.alloc(t + 120, 0x100b00000, 4 * MiB, grad, ag);
      b.alloc(t + 121, 0x100f00000, 2 * MiB, grad, ag);
    }
    b.free(t + 150, 0x100700000, ag);
    b.alloc(t + 160, 0x101100000, 1 * MiB, layer, ag);
    b.free(t + 170, 0x101100000, ag);
    b.phase(t + 210, t + 300, "auto:optimizer");
    if (k == 0) {
      b.alloc(t + 220, 0x101200000, 8 * MiB, adam);
      b.alloc(t + 221, 0x101a00000, 4 * MiB, adam);
    }
    b.alloc(t + 230, 0x101e00000, 1 * MiB, adam);
    b.free(t + 240, 0x101e00000);
    b.walk(t + 300, snap::OwnerRole::kGradient, {{0x100b00000, 4 * MiB}, {0x100f00000, 2 * MiB}});
    b.walk(t + 300, snap::OwnerRole::kOptimizerState,
           {{0x101200000, 8 * MiB}, {0x101a00000, 4 * MiB}});
    b.mark(t + 300, "auto:step");
    b.free(t + 310, 0x100600000);
  }
  auto s = b.finish();
  label_categories(s);
  return s;
}

// training()'s stacks, in the order it makes them; labels come from the one site rule (frames.h).
constexpr int32_t kModelCuda = 0, kBatch = 1, kKeep = 2, kAdam = 5;

int64_t added(const LedgerPhase& p, Category c) {
  for (const auto& cb : p.added_by_category)
    if (cb.category == c) return cb.bytes;
  return 0;
}
uint64_t held(const LedgerMoment& m, Category c) {
  for (const auto& cb : m.by_category)
    if (cb.category == c) return static_cast<uint64_t>(cb.bytes);
  return 0;
}

}  // namespace

TEST_CASE("ledger: per phase of the first and the steady step, exact bytes", "[ledger]") {
  const auto s = training(4, 0);
  const SiteTable sites(s);
  const auto l = build_ledger(s, sites);
  REQUIRE(l);
  CHECK(l->training);
  CHECK(l->steps == 5);  // 4 complete and what follows the last mark
  CHECK(l->complete_steps == 4);
  REQUIRE(l->devices.size() == 1);
  const auto& d = l->devices[0];

  REQUIRE(d.first.size() == 4);  // setup (before the loop), forward, backward, optimizer
  const auto& setup = d.first[0];
  CHECK(setup.phase == Phase::kSetup);
  CHECK(setup.allocated_before == 0);
  CHECK(setup.allocated_after == 7 * MiB);
  CHECK(setup.reserved_before == 0);
  CHECK(setup.reserved_after == 256 * MiB);
  CHECK(added(setup, Category::kParameter) == 6 * iMiB);
  CHECK(added(setup, Category::kInput) == 1 * iMiB);
  CHECK(setup.added_by_category.size() == 2);
  REQUIRE(setup.added_by_site.size() == 2);
  CHECK(setup.added_by_site[0].site == sites.site(kModelCuda));
  CHECK(setup.added_by_site[0].bytes == 6 * iMiB);
  CHECK(setup.added_by_site[0].count == 2);
  CHECK(setup.added_by_site[0].category == Category::kParameter);

  const auto& fwd = d.first[1];
  CHECK(fwd.phase == Phase::kForward);
  CHECK(fwd.allocated_before == 7 * MiB);
  CHECK(fwd.allocated_after == 10 * MiB);
  CHECK(fwd.allocated_peak.bytes == 11 * MiB);
  CHECK(fwd.allocated_peak.time_us == 1030);
  CHECK(added(fwd, Category::kActivation) == 3 * iMiB);
  CHECK(added(fwd, Category::kTemporary) == 0);  // +1 MiB -1 MiB: not listed
  CHECK(fwd.added_by_category.size() == 1);

  const auto& bwd = d.first[2];
  CHECK(bwd.phase == Phase::kBackward);
  CHECK(bwd.allocated_before == 10 * MiB);
  CHECK(bwd.allocated_after == 13 * MiB);
  CHECK(bwd.allocated_peak.bytes == 16 * MiB);
  CHECK(added(bwd, Category::kGradient) == 6 * iMiB);
  CHECK(added(bwd, Category::kActivation) == -3 * iMiB);

  const auto& opt = d.first[3];
  CHECK(opt.phase == Phase::kOptimizer);
  CHECK(opt.allocated_after == 25 * MiB);
  CHECK(opt.allocated_peak.bytes == 26 * MiB);
  CHECK(added(opt, Category::kOptimizerState) == 12 * iMiB);
  CHECK(opt.added_by_site.size() == 1);
  CHECK(opt.added_by_site[0].site == sites.site(kAdam));

  // The steady state: step 4 (index 3); its data stretch holds the last input's free and the new
  // one.
  REQUIRE(d.steady_step);
  CHECK(*d.steady_step == 3);
  REQUIRE(d.steady.size() == 4);
  CHECK(d.steady[0].phase == Phase::kData);
  CHECK(d.steady[0].allocated_before == 25 * MiB);  // X of step 3 still held
  CHECK(d.steady[0].allocated_after == 25 * MiB);
  CHECK(d.steady[0].added_by_category.empty());
  CHECK(d.steady[1].allocated_after == 28 * MiB);
  CHECK(d.steady[1].allocated_peak.bytes == 29 * MiB);
  CHECK(d.steady[2].allocated_after == 25 * MiB);
  CHECK(added(d.steady[2], Category::kActivation) == -3 * iMiB);
  CHECK(d.steady[3].allocated_after == 25 * MiB);
  CHECK(d.steady[3].added_by_category.empty());

  // One truth: every delta is the replay's allocated_after() at the span's boundaries.
  const DeviceReplay rp(s, 0);
  for (const auto* rows : {&d.first, &d.steady}) {
    for (const auto& p : *rows) {
      int64_t sum = 0;
      for (const auto& c : p.added_by_category) sum += c.bytes;
      CHECK(static_cast<int64_t>(p.allocated_after - p.allocated_before) == sum);
      CHECK(p.allocated_before == rp.allocated_after(p.before_index));
      CHECK(p.allocated_after == rp.allocated_after(p.last_index));
      if (p.end_us != std::numeric_limits<int64_t>::max())
        CHECK(p.last_index == rp.index_at_time(p.end_us - 1));
    }
  }
}

TEST_CASE("ledger: the peaks by category, the cache, other libraries", "[ledger]") {
  const auto s = training(4, 0);
  const SiteTable sites(s);
  const auto l = build_ledger(s, sites);
  REQUIRE(l);
  const auto& m = l->devices[0].allocated_peak;
  CHECK(m.allocated == 29 * MiB);
  CHECK(m.time_us == 2030);  // step 2's forward: first reached there
  CHECK(m.step == 1);
  CHECK(m.phase == Phase::kForward);
  CHECK(held(m, Category::kParameter) == 6 * MiB);
  CHECK(held(m, Category::kGradient) == 6 * MiB);
  CHECK(held(m, Category::kOptimizerState) == 12 * MiB);
  CHECK(held(m, Category::kActivation) == 3 * MiB);
  CHECK(held(m, Category::kInput) == 1 * MiB);
  CHECK(held(m, Category::kTemporary) == 1 * MiB);
  CHECK(m.by_category.size() == 6);
  CHECK(m.reserved == 256 * MiB);
  CHECK(m.layers.cached_free == 227 * MiB);
  REQUIRE(m.layers.by_library.size() == 1);
  CHECK(m.layers.by_library[0].first == "libcublasLt.so.12");
  CHECK(m.layers.by_library[0].second == 8 * MiB);
  REQUIRE(!m.by_site.empty());
  CHECK(m.by_site[0].site == sites.site(kAdam));
  CHECK(m.by_site[0].bytes == 12 * iMiB);
  const auto& r = l->devices[0].reserved_peak;
  CHECK(r.reserved == 256 * MiB);
  CHECK(r.time_us == 1);  // the segment: nothing allocated yet
  CHECK(r.allocated == 0);
  CHECK(r.by_category.empty());
  CHECK(r.layers.cached_free == 256 * MiB);
}

// PyTorch's allocator does not split a large block when under 1 MiB would remain: a 4 MiB
// weight cut from the last 5 MiB of a 20 MiB segment holds 5 MiB of memory_allocated(), while
// named_parameters() (and the view by module) say 4 MiB. The ledger names both.
TEST_CASE("ledger: a category's blocks and its tensors' own bytes, both named", "[ledger]") {
  TorchRunBuilder b;
  const auto model_cuda = b.line("train.py", 5, "<module>");
  const auto layer = b.line("model.py", 20, "forward");
  b.segment(1, 0x100000000, 20 * MiB);  // made for a 20 MiB tensor, then cached
  b.alloc(2, 0x100000000, 20 * MiB, model_cuda);
  b.free(3, 0x100000000);
  b.alloc(10, 0x100000000, 15 * MiB, model_cuda);
  b.alloc_in_block(11, 0x100f00000, 4 * MiB, 5 * MiB, model_cuda);
  b.walk(20, snap::OwnerRole::kParameter, {{0x100000000, 15 * MiB}, {0x100f00000, 4 * MiB}});
  b.names(20, snap::OwnerRole::kParameter,
          {{0x100000000, "enc.weight"}, {0x100f00000, "head.weight"}});
  for (int k = 0; k < 2; ++k) {
    const int64_t t = 1000 * (k + 1);
    b.phase(t + 10, t + 100, "auto:forward");
    if (k == 0) b.segment(t + 20, 0x101400000, 2 * MiB);  // the small pool's
    b.alloc(t + 20, 0x101400000, 512 * 1024, layer);
    b.free(t + 200, 0x101400000);
    b.mark(t + 300, "auto:step");
  }
  auto s = b.finish();
  std::vector<std::string> why;
  CHECK(label_block_sizes(s, &why) == 1);  // as every command reads a file (snapshot_inputs.cpp)
  CHECK(why.empty());
  for (const auto& w : why) UNSCOPED_INFO(w);
  label_categories(s);
  const SiteTable sites(s);
  const auto l = build_ledger(s, sites);
  REQUIRE(l);
  const auto& m = l->devices[0].allocated_peak;
  CHECK(m.allocated == 20 * MiB + 512 * 1024);  // memory_allocated(): the blocks
  CHECK(m.time_us == 1020);
  REQUIRE(m.by_category.size() == 2);
  CHECK(m.by_category[0].category == Category::kParameter);
  CHECK(m.by_category[0].bytes == 20 * iMiB);
  CHECK(m.by_category[0].tensor_bytes == 19 * iMiB);  // named_parameters()
  CHECK(categories_text(m.by_category, false) ==
        "parameter 20.0 MiB (tensors 19.0 MiB), activation 512 KiB");
  const auto setup = l->devices[0].first.at(0);
  CHECK(setup.phase == Phase::kSetup);
  CHECK(categories_text(setup.added_by_category, true) ==
        "parameter +20.0 MiB (tensors +19.0 MiB)");
  const auto j = ledger_json(*l, 10);
  const auto& jm = j["devices"][0]["allocated_peak"];
  CHECK(jm["by_category"]["parameter"] == 20 * MiB);
  CHECK(jm["tensor_bytes_by_category"]["parameter"] == 19 * MiB);
  // Equal numbers are shown once.
  CHECK(categories_text({{Category::kActivation, 3 * iMiB, 3 * iMiB}}, false) ==
        "activation 3.00 MiB");
}

TEST_CASE("ledger: growth per step of a loop that keeps each step's output", "[ledger]") {
  const uint64_t kept = 36 * MiB + 4096;
  const auto s = training(6, kept);
  const SiteTable sites(s);
  const auto l = build_ledger(s, sites);
  REQUIRE(l);
  const auto& g = l->devices[0].growth;
  REQUIRE(g.judged);
  CHECK(g.warmup == 2);
  CHECK(g.first_counted == 2);
  CHECK(g.last_counted == 4);
  CHECK(g.end_step == 5);
  CHECK(g.steps_counted == 3);
  CHECK(g.bytes == 3 * kept);
  CHECK(g.per_step == kept);
  REQUIRE(g.by_site.size() == 1);
  CHECK(g.by_site[0].site == sites.site(kKeep));
  CHECK(g.by_site[0].category == Category::kActivation);
  CHECK(g.by_site[0].bytes == static_cast<int64_t>(kept));
  CHECK(g.by_site[0].count == 3);
  // Leaked: the outputs of steps 3..6 (after the 2-step warm-up); not the parameters, gradients,
  // optimizer state, cuBLAS's workspace (before the warm-up) or the cache.
  CHECK(l->devices[0].warmup == 2);
  CHECK(l->devices[0].leaked.size() == 4);
  CHECK(l->devices[0].leaked_bytes == 4 * kept);

  std::ostringstream text;
  print_ledger_text(*l, 0, 10, text);
  CHECK_THAT(text.str(), Catch::Contains("device 0, growth per step: 36.0 MiB a step (tensors of "
                                         "step 3 .. step 5 still live at the end of step 6, after "
                                         "a warm-up of 2 steps)\n"
                                         "        grows 36.0 MiB a step at " +
                                         sites.site(kKeep) + " (activation)\n"));
}

TEST_CASE("ledger: no growth without a leak; too few steps are not judged", "[ledger]") {
  {
    const auto s = training(6, 0);
    const SiteTable sites(s);
    const auto l = build_ledger(s, sites);
    REQUIRE(l);
    CHECK(l->devices[0].growth.judged);
    CHECK(l->devices[0].growth.bytes == 0);
    CHECK(l->devices[0].growth.by_site.empty());
    CHECK(l->devices[0].leaked.empty());
  }
  {
    const auto s = training(2, 8 * MiB);
    const SiteTable sites(s);
    const auto l = build_ledger(s, sites);
    REQUIRE(l);
    const auto& g = l->devices[0].growth;
    CHECK_FALSE(g.judged);
    CHECK(g.why ==
          "2 steps complete; growth per step needs 3 (a warm-up step, a counted one and one after "
          "it)");
    CHECK_FALSE(l->devices[0].steady_step == std::nullopt);
    CHECK(l->devices[0].warmup == 1);
    CHECK(l->devices[0].leaked_bytes == 8 * MiB);  // step 2's output
  }
}

TEST_CASE("ledger: inference iterations, and none for a run without phases", "[ledger]") {
  TorchRunBuilder b;
  const auto ln = b.line("infer.py", 9);
  b.segment(1, 0x100000000, 64 * MiB);
  b.alloc(5, 0x100000000, 2 * MiB, ln);
  b.walk(6, snap::OwnerRole::kParameter, {{0x100000000, 2 * MiB}});
  for (int k = 0; k < 5; ++k) {
    const int64_t t = 100 * (k + 1);
    b.phase(t, t + 50, "auto:forward");
    b.alloc(t + 10, 0x100200000 + k * MiB, 1 * MiB, ln);  // kept: each forward's output
  }
  auto s = b.finish();
  label_categories(s);
  const SiteTable sites(s);
  const auto l = build_ledger(s, sites);
  REQUIRE(l);
  CHECK_FALSE(l->training);
  CHECK(l->steps == 5);
  CHECK(l->complete_steps == 4);
  const auto& g = l->devices[0].growth;
  REQUIRE(g.judged);
  CHECK(g.per_step == 1 * MiB);
  CHECK(g.steps_counted == 1);  // iteration 3's output, live at the end of iteration 4
  CHECK(l->devices[0].leaked_bytes == 3 * MiB);  // iterations 3..5's outputs, not the weights

  TorchRunBuilder plain;
  plain.segment(1, 0x100000000, 64 * MiB);
  plain.alloc(5, 0x100000000, 2 * MiB, plain.line("a.py", 1));
  const auto p = plain.finish();
  const SiteTable ps(p);
  CHECK_FALSE(build_ledger(p, ps));
}

TEST_CASE("report starts with the ledger of a PyTorch run with phases", "[ledger][report]") {
  const auto s = training(4, 0);
  const SiteTable sites(s);
  const auto r = build_report(s, sites, "train.json");
  std::ostringstream text;
  print_report_text(r, s, sites, {}, text);
  const std::string t = text.str();
  const auto ledger = t.find(
      "\nPyTorch ledger (automatic phases: 4 complete steps (1 more begun, not completed))\n");
  REQUIRE(ledger != std::string::npos);
  CHECK(ledger < t.find("\nDevice 0\n"));
  CHECK_THAT(t, Catch::Contains("  device 0, step 1 (the first):\n"
                                "    setup       allocated 0 B -> 7.00 MiB (+7.00 MiB), reserved "
                                "0 B -> 256 MiB, peak 7.00 MiB\n"
                                "        added: parameter +6.00 MiB, input +1.00 MiB\n"
                                "           +6.00 MiB  " +
                                sites.site(kModelCuda) +
                                " (parameter)\n"
                                "           +1.00 MiB  " +
                                sites.site(kBatch) +
                                " (input)\n"
                                "    forward     allocated 7.00 MiB -> 10.0 MiB (+3.00 MiB)"));
  CHECK_THAT(t, Catch::Contains("        cached, free in PyTorch's cache: 227 MiB\n"
                                "        other libraries: libcublasLt.so.12 8.00 MiB\n"));
  std::ostringstream js;
  print_report_json(r, s, sites, {}, js);
  const auto j = nlohmann::json::parse(js.str());
  const auto& d = j["pytorch_ledger"]["devices"][0];
  CHECK(d["first_step"]["phases"][1]["phase"] == "forward");
  CHECK(d["first_step"]["phases"][1]["added_by_category"]["activation"] == 3 * MiB);
  CHECK(d["steady_step"]["step"] == 4);
  CHECK(d["allocated_peak"]["by_category"]["optimizer_state"] == 12 * MiB);
  CHECK(d["allocated_peak"]["cached_free_bytes"] == 227 * MiB);
  CHECK(d["growth"]["judged"] == true);
  CHECK(d["growth"]["bytes_per_step"] == 0);
}

namespace {

int run_check_on(const snap::Snapshot& s, const CheckOptions& o, std::string* text) {
  std::ostringstream out, err;
  const int rc = run_check({{"train.json", s}}, o, out, err);
  *text = out.str() + err.str();
  return rc;
}

}  // namespace

TEST_CASE("check --max-growth-per-step gates the ledger's growth", "[ledger][check]") {
  const uint64_t kept = 36 * MiB + 4096;
  const auto s = training(6, kept);
  const SiteTable sites(s);
  std::string text;
  CheckOptions o;
  o.max_growth_per_step = 1 * MiB;
  CHECK(run_check_on(s, o, &text) == 1);
  CHECK_THAT(text, Catch::Contains("train.json: error: device 0 grows 36.0 MiB a step, most at " +
                                   sites.site(kKeep) +
                                   " (activation) (tensors of steps 3..5 still live at the end of "
                                   "step 6, after a warm-up of 2 steps; limit 1.00 MiB)\n"
                                   "  grows 36.0 MiB a step at " +
                                   sites.site(kKeep) + " (activation):\n"));
  o.max_growth_per_step = kept;  // exactly the growth: holds
  CHECK(run_check_on(s, o, &text) == 0);
  o.max_growth_per_step = 0;
  CHECK(run_check_on(training(6, 0), o, &text) == 0);

  // Cannot judge: never a pass, and the finding says it judged nothing (JSON's "judged": false,
  // the pytest plugin's "could not be judged" heading), beyond its words.
  CHECK(run_check_on(training(2, 0), o, &text) == 1);
  CHECK_THAT(text, Catch::Contains("error: growth per step on device 0 cannot be judged: 2 steps "
                                   "complete; growth per step needs 3"));
  {
    std::ostringstream out, err;
    CheckResult r;
    CHECK(run_check({{"train.json", training(2, 0)}}, o, out, err, &r) == 1);
    std::vector<std::tuple<std::string, int, Severity, bool>> got;
    for (const auto& f : r.findings)
      if (f.check == "growth-per-step") got.emplace_back(f.check, f.device, f.severity, f.judged);
    CHECK(got == std::vector<std::tuple<std::string, int, Severity, bool>>{
                     {"growth-per-step", 0, Severity::kError, false}});
    // Judged at 3 complete steps: the same finding, judged.
    CheckResult judged;
    CHECK(run_check({{"train.json", training(3, 0)}}, o, out, err, &judged) == 0);
    const auto g = std::find_if(judged.findings.begin(), judged.findings.end(),
                                [](const Finding& f) { return f.check == "growth-per-step"; });
    REQUIRE(g != judged.findings.end());
    CHECK(g->judged);
    CHECK(g->severity == Severity::kPass);
  }
  TorchRunBuilder plain;
  plain.segment(1, 0x100000000, 64 * MiB);
  plain.alloc(5, 0x100000000, 2 * MiB, plain.line("a.py", 1));
  CHECK(run_check_on(plain.finish(), o, &text) == 1);
  CHECK_THAT(text, Catch::Contains("error: growth per step cannot be judged: the snapshot has no "
                                   "automatic steps"));
}

TEST_CASE("check --max-leaked-bytes on a PyTorch run counts what a user calls leaked",
          "[ledger][check]") {
  std::string text;
  CheckOptions o;
  o.max_leaked_bytes = 0;
  // Parameters, gradients, optimizer state, cuBLAS's workspace and the cache: none is a leak.
  CHECK(run_check_on(training(6, 0), o, &text) == 0);
  const uint64_t kept = 2 * MiB;
  CHECK(run_check_on(training(6, kept), o, &text) == 1);
  CHECK_THAT(text, Catch::Contains("train.json: error: 8.00 MiB leaked on device 0 by 4 "
                                   "allocations: tensors allocated after a warm-up of 2 steps that "
                                   "are not parameters, gradients or optimizer state, and other "
                                   "libraries' memory allocated after it, still held at the end "
                                   "(limit 0 B)\n"));
}

TEST_CASE("check --max-growth without --mark measures at the automatic steps' ends",
          "[ledger][check]") {
  std::string text;
  CheckOptions o;
  o.max_growth = 0;
  o.format = "json";
  CHECK(run_check_on(training(6, 0), o, &text) == 0);
  const auto j = nlohmann::json::parse(text);
  bool found = false;
  for (const auto& f : j["files"][0]["checks"]) {
    if (f["check"] != "growth") continue;
    found = true;
    CHECK(f["message"] ==
          "live bytes on device 0 grew by +0 B between the ends of automatic steps 2 and 6 "
          "(33.0 MiB -> 33.0 MiB; limit 0 B)");  // the tensors and cuBLAS's 8 MiB, not the cache
  }
  CHECK(found);
}

TEST_CASE("check --max-growth without --mark blames tensors as --max-growth-per-step does",
          "[ledger][check]") {
  // The kept outputs fill PyTorch's one segment: measured by segments nothing grows; by tensors
  // each step keeps 36 MiB + 4 KiB at the line that keeps it, the site --max-growth-per-step
  // names.
  const uint64_t kept = 36 * MiB + 4096;
  const auto s = training(6, kept);
  const SiteTable sites(s);
  std::string text;
  CheckOptions o;
  o.max_growth = 1 * MiB;
  CHECK(run_check_on(s, o, &text) == 1);
  CHECK_THAT(text, Catch::Contains("live bytes on device 0 grew by +144 MiB between the ends of "
                                   "automatic steps 2 and 6"));
  CHECK_THAT(text, Catch::Contains("+144 MiB grew at " + sites.site(kKeep)));
  o.max_growth_per_step = 1 * MiB;
  CHECK(run_check_on(s, o, &text) == 1);
  CHECK_THAT(text, Catch::Contains("grows 36.0 MiB a step at " + sites.site(kKeep)));
}

TEST_CASE("diff compares two PyTorch runs by phase and by category", "[ledger][diff]") {
  const auto base = training(6, 0);
  const auto now = training(6, 2 * MiB);
  const auto d = diff_snapshots(base, "base.json", now, "new.json");
  REQUIRE(d.ledgers);
  auto find = [](const std::vector<ValueDiff>& v, const std::string& name) {
    for (const auto& x : v)
      if (x.name == name) return x;
    FAIL("no " << name);
    return ValueDiff{};
  };
  CHECK(find(d.pytorch_peaks, "allocated peak").base == 29 * iMiB);
  CHECK(find(d.pytorch_peaks, "allocated peak").now == 40 * iMiB);  // step 6: 6 outputs kept
  CHECK(find(d.pytorch_peaks, "reserved peak").now == 256 * iMiB);
  CHECK(find(d.phases, "forward").base == 3 * iMiB);
  CHECK(find(d.phases, "forward").now == 5 * iMiB);
  CHECK(find(d.phases, "backward").now == -3 * iMiB);
  CHECK(d.phases.size() == 4);
  CHECK(find(d.categories, "allocated peak: activation").base == 3 * iMiB);
  CHECK(find(d.categories, "allocated peak: activation").now == 15 * iMiB);
  CHECK(find(d.categories, "allocated peak: optimizer state").now == 12 * iMiB);
  std::ostringstream text;
  print_diff_text(d, 10, text);
  CHECK_THAT(text.str(),
             Catch::Contains("\nPyTorch peaks:\n"
                             "  device 0 allocated peak: 29.0 MiB -> 40.0 MiB  +11.0 MiB (+37.9%)\n"
                             "\nPyTorch, added per phase"));
  // Only what changed is listed: the reserved peak, the same on both sides, is not.
  CHECK_THAT(text.str(), !Catch::Contains("reserved peak: 256 MiB -> 256 MiB"));
  CHECK_THAT(text.str(),
             Catch::Contains("  device 0 forward: +3.00 MiB -> +5.00 MiB  +2.00 MiB\n"));
  CHECK_THAT(text.str(), Catch::Contains("  device 0 allocated peak: activation: 3.00 MiB -> 15.0 "
                                         "MiB  +12.0 MiB (+400.0%)\n"));
  std::ostringstream js;
  print_diff_json(d, js);
  const auto j = nlohmann::json::parse(js.str());
  CHECK(j["pytorch"]["phases"][1]["name"] == "forward");
  CHECK(j["pytorch"]["phases"][1]["change_bytes"] == 2 * MiB);

  TorchRunBuilder plain;
  plain.segment(1, 0x100000000, 64 * MiB);
  const auto p = plain.finish();
  const auto one = diff_snapshots(p, "plain.json", now, "new.json");
  CHECK_FALSE(one.ledgers);
  CHECK(one.ledger_note ==
        "only new.json is a PyTorch run with automatic phases: no comparison by phase or category");
}

TEST_CASE("check --max-growth-per-step --range judges the steps within the window",
          "[ledger][check]") {
  const uint64_t kept = 36 * MiB;
  auto s = training(8, kept);
  s.annotations.push_back({"pytest:t", "START", 0, 3999});  // steps 4..8 end within it
  s.annotations.push_back({"pytest:t", "END", 0, 8400});
  s.annotations.push_back({"pytest:s", "START", 0, 999});  // steps 1..2 only
  s.annotations.push_back({"pytest:s", "END", 0, 2400});
  const SiteTable sites(s);
  std::string text;
  CheckOptions o;
  o.max_growth_per_step = 1 * MiB;
  o.range = "pytest:t";
  CHECK(run_check_on(s, o, &text) == 1);
  CHECK_THAT(text, Catch::Contains("error: device 0 within range 'pytest:t' grows 36.0 MiB a step, "
                                   "most at " +
                                   sites.site(kKeep) +
                                   " (activation) (tensors of steps 6..7 still live at the end of "
                                   "step 8, after a warm-up of 2 steps; limit 1.00 MiB)\n"));
  o.range = "pytest:s";
  CHECK(run_check_on(s, o, &text) == 1);
  CHECK_THAT(text, Catch::Contains("error: growth per step on device 0 within range 'pytest:s' "
                                   "cannot be judged: 2 steps complete;"));
}

TEST_CASE("check --range charges a window with its own tensors, never PyTorch's cache",
          "[ledger][check][range]") {
  // Window a makes PyTorch cache a 20 MiB segment for a 4 MiB tensor it frees; window b reuses the
  // cache for a 2 MiB tensor it keeps; window c, with 20 MiB reserved and b's tensor live at its
  // START, frees b's tensor and allocates 1 MiB it frees. Each is charged with its own tensors.
  TorchRunBuilder b;
  const auto site = b.line("test_model.py", 12, "test_x");
  b.start(100, "pytest:a");
  b.segment(110, 0x100000000, 20 * MiB);
  b.alloc(111, 0x100000000, 4 * MiB, site);
  b.free(130, 0x100000000);
  b.end(200, "pytest:a");
  b.start(300, "pytest:b");
  b.alloc(310, 0x100000000, 2 * MiB, site);
  b.end(400, "pytest:b");
  b.start(500, "pytest:c");
  b.free(510, 0x100000000);
  b.alloc(520, 0x100200000, 1 * MiB, site);
  b.free(530, 0x100200000);
  b.end(600, "pytest:c");
  const auto s = b.finish();
  auto judged = [&](const std::string& range) {
    CheckOptions o;
    o.range = range;
    o.max_peak_bytes = 0;
    o.max_leaked_bytes = 0;
    o.format = "json";
    std::string text;
    CHECK(run_check_on(s, o, &text) == 1);
    const auto doc = nlohmann::json::parse(text);
    std::vector<std::pair<std::string, uint64_t>> got;
    for (const auto& c : doc["files"][0]["checks"])
      if (c["check"] != "complete") got.emplace_back(c["check"], c["value"]);
    return got;
  };
  using V = std::vector<std::pair<std::string, uint64_t>>;
  CHECK(judged("pytest:a") == V{{"leaked-bytes", 0}, {"peak-bytes", 4 * MiB}});
  CHECK(judged("pytest:b") == V{{"leaked-bytes", 2 * MiB}, {"peak-bytes", 2 * MiB}});
  CHECK(judged("pytest:c") == V{{"leaked-bytes", 0}, {"peak-bytes", 1 * MiB}});
}

TEST_CASE("process summary: the ledger's numbers, written as JSON and read back unchanged",
          "[ledger][summary]") {
  // What the writer writes the reader reads (process_summary.h): every field of a PyTorch run's
  // summary survives summary_json -> summary_from_json, and holds the report's and check's numbers.
  const uint64_t kept = 36 * MiB + 4096;
  const auto s = training(6, kept);
  const SiteTable sites(s);
  const Report r = build_report(s, sites, "train.json");
  const ProcessSummary p = summarize_process(s, r, {"train.json", 123, 456});
  REQUIRE(p.devices.size() == 1);
  const DeviceSummary& d = p.devices[0];
  CHECK(d.peak_bytes == r.devices[0].timeline.highest_known().bytes);
  CHECK(d.allocated_peak_bytes == r.devices[0].timeline.allocated.bytes);
  REQUIRE(d.has_ledger);
  REQUIRE(d.growth);
  CHECK(d.growth->per_step == r.ledger->devices[0].growth.per_step);
  CHECK(d.growth->by_site.size() == 1);
  CHECK(d.limits.leaked_warmup == r.ledger->devices[0].warmup);
  CHECK(d.limits.leaked_bytes == r.ledger->devices[0].leaked_bytes);
  CHECK(d.limits.allocated);
  CHECK(p.steps == r.ledger->steps);
  const nlohmann::json j = summary_json(p);
  const ProcessSummary back = summary_from_json(nlohmann::json::parse(j.dump()));
  CHECK(summary_json(back) == j);
  CHECK(back.file == p.file);
  CHECK(back.devices[0].categories == d.categories);
  CHECK(back.devices[0].limits.allocated == d.limits.allocated);
  // Not a summary, or another version: refused with one line (readers then read the snapshot).
  CHECK_THROWS_WITH(summary_from_json(nlohmann::json::object()), "not a cumemtrace summary");
  nlohmann::json v2 = j;
  v2["cumemtrace_summary"] = 2;
  CHECK_THROWS_WITH(summary_from_json(v2), "a summary of version 2, not 1");
}
