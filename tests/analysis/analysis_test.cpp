// Analysis tests: replay/peak (including a trace window that starts mid-run), live at exit,
// sites, suppressions, every check limit and outcome, output formats, and diff.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "analysis/breakdown_format.h"
#include "analysis/frames.h"
#include "analysis/model.h"
#include "io/snapshot_input.h"
#include "support/snapshot_builder.h"
#include "support/torch_fixture.h"
#include "verdicts/check.h"
#include "verdicts/diff.h"
#include "verdicts/github.h"
#include "verdicts/junit.h"
#include "verdicts/report.h"
#include "verdicts/suppressions.h"

using namespace cumemtrace;
using namespace cumemtrace::analysis;

namespace {

constexpr uint64_t MiB = 1 << 20;

// 3 MiB peak, 2 MiB leaked by allocate_weights, 1 MiB transient.
snap::Snapshot leaky() {
  testing::SnapshotBuilder b;
  const auto w = b.site("allocate_weights", "tests/programs/scenarios.cpp", 42);
  const auto t = b.site("scratch", "tests/programs/scenarios.cpp", 60);
  b.alloc(0x10000000, 2 * MiB, w);
  b.alloc(0x20000000, 1 * MiB, t);
  b.free(0x20000000);
  return b.finish();
}

// Grows by 1 MiB per step at grow_cache; marks "step" before each of 5 steps.
snap::Snapshot growing(uint64_t per_step) {
  testing::SnapshotBuilder b;
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

int check(const snap::Snapshot& s, CheckOptions o, std::string* out_text = nullptr) {
  std::ostringstream out, err;
  const int rc = run_check({{"traces/app.1234.json", s}}, o, out, err);
  if (out_text) *out_text = out.str() + err.str();
  return rc;
}

const std::string& kFixture = testing::kTorchLast1500;

}  // namespace

TEST_CASE("site is the innermost program frame", "[model]") {
  const auto s = leaky();
  const SiteTable sites(s);
  CHECK(sites.site(0) == "allocate_weights (scenarios.cpp:42)");
  CHECK(sites.site(snap::kNoStack) == kNoStackSite);
  CHECK(is_runtime_frame({"", 0, "c10::cuda::CUDACachingAllocator::Native::malloc"}));
  CHECK_FALSE(is_runtime_frame({"train.py", 3, "step"}));
  const auto lines = stack_lines(sites, 0, false, 8);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "at allocate_weights (tests/programs/scenarios.cpp:42)");
  CHECK(lines[1] == "at main (tests/programs/scenarios.cpp:142)");
}

TEST_CASE("a site's library is its innermost native frame, not its Python line", "[model]") {
  snap::Snapshot s;
  s.stacks = {
      // A library's workspace asked for under a Python line: the site is the line, the library
      // the native code below it, past the runtime's frames.
      {{"/usr/lib/libcudart.so.13", 0, "cudaMalloc"},
       {"/venv/nvidia/cu13/lib/libcublasLt.so.13", 0, "cublasLtMatmul"},
       {"/venv/torch/lib/libtorch_cuda.so", 0, "at::cuda::blas::gemm"},
       {"/venv/torch/nn/modules/linear.py", 134, "Linear.forward"}},
      // Python frames only: the site's file is all there is.
      {{"/work/app/model.py", 7, "build"}},
      // Native only, with the runtime innermost.
      {{"/usr/lib/libcudart.so.13", 0, "cudaMalloc"}, {"/opt/app/libsolver.so", 0, "solve"}},
  };
  const SiteTable sites(s);
  CHECK(sites.site(0) == "Linear.forward (linear.py:134)");
  CHECK(sites.library(0) == "libcublasLt.so.13");
  CHECK(sites.library(1) == "model.py");
  CHECK(sites.library(2) == "libsolver.so");
  CHECK(sites.library(snap::kNoStack) == "(unknown)");
}

TEST_CASE("a Python site is the user's own line, with the library frame beside it", "[model]") {
  snap::Snapshot s;
  s.stacks = {
      // PyTorch's op under the user's forward under the user's loop, stdlib and torch between.
      {{"/opt/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", 134, "Linear.forward"},
       {"/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", 1786,
        "Module._call_impl"},
       {"/home/u/proj/model.py", 31, "Net.forward"},
       {"/usr/lib/python3.12/contextlib.py", 81, "inner"},
       {"/home/u/proj/train.py", 76, "step"}},
      // Native library code under the user's line: the site is the line, no library Python frame
      // to show beside it.
      {{"/usr/lib/libcudart.so.13", 0, "cudaMalloc"},
       {"/venv/torch/lib/libtorch_cuda.so", 0, "at::cuda::blas::gemm"},
       {"/home/u/proj/train.py", 80, "step"}},
      // Debian's packages and the interpreter's own files only: the innermost Python frame.
      {{"/usr/lib/python3/dist-packages/numpy/core/numeric.py", 5, "zeros"},
       {"/usr/lib64/python3.11/runpy.py", 88, "_run_code"}},
      // A PyTorch source checkout run in place is library code too.
      {{"/src/pytorch/torch/optim/adam.py", 178, "Adam._init_group"},
       {"/src/pytorch/train_ref.py", 12, "main"}},
      // cumemtrace's own wrapper of init_process_group (in the target) is never the user's line.
      {{"/venv/lib/python3.12/site-packages/torch/distributed/distributed_c10d.py", 2253,
        "_new_process_group_helper"},
       {"/opt/ct/lib/cumemtrace/python/cumemtrace_ranks.py", 45,
        "wrap.<locals>.init_process_group"},
       {"/home/u/proj/ddp.py", 20, "main"}},
  };
  set_library_code("");
  SiteTable sites(s);
  CHECK(sites.site(0) == "Net.forward (model.py:31) via Linear.forward (linear.py:134)");
  CHECK(sites.site_frame(0) == 2);
  CHECK(via_frame_index(s.stacks[0], 2) == 0);
  CHECK(sites.site(1) == "step (train.py:80)");
  CHECK(sites.site(2) == "zeros (numeric.py:5)");
  CHECK(via_frame_index(s.stacks[2], 0) == -1);
  CHECK(sites.site(3) == "main (train_ref.py:12) via Adam._init_group (adam.py:178)");
  CHECK(sites.site(4) ==
        "main (ddp.py:20) via _new_process_group_helper (distributed_c10d.py:2253)");
  // Stack lines start at the user's line; the library frames inside it are the site's "via".
  const auto lines = stack_lines(sites, 0, false, 8);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0] == "at Net.forward (/home/u/proj/model.py:31)");
  CHECK(lines[2] == "at step (/home/u/proj/train.py:76)");
  CHECK(SiteTable(s, true).site(0) ==
        "Net.forward (/home/u/proj/model.py:31) via Linear.forward "
        "(/opt/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py:134)");

  // Configurable: the user's model.py counted as library code, and an installed package of the
  // user's counted as theirs.
  set_library_code("/proj/model.py,!site-packages/torch/nn/modules/module.py");
  const SiteTable configured(s);
  CHECK(configured.site(0) ==
        "Module._call_impl (module.py:1786) via Linear.forward (linear.py:134)");
  set_library_code("/proj/,");
  CHECK(SiteTable(s).site(0) == "Linear.forward (linear.py:134)");
  CHECK(SiteTable(s).site(1) == "step (train.py:80)");  // every Python frame library: rule 2
  set_library_code("");
  CHECK(SiteTable(s).site(0) == "Net.forward (model.py:31) via Linear.forward (linear.py:134)");
}

TEST_CASE("backward's site is its caller's line via the node; a trainer's the model file's",
          "[model]") {
  const std::string tf = "/venv/lib/python3.11/site-packages/transformers/";
  const std::string apply =
      "torch::autograd::generated::AddmmBackward0::apply(std::vector<at::Tensor, "
      "std::allocator<at::Tensor> >&&)";
  snap::Snapshot s;
  s.stacks = {
      // Autograd's engine thread: the node, then the frames the backward's caller lent.
      {{"libtorch_cpu.so", 0, apply},
       {"/venv/lib/python3.11/site-packages/torch/autograd/__init__.py", 353, "backward"},
       {"/venv/lib/python3.11/site-packages/torch/_tensor.py", 648, "Tensor.backward"},
       {"/home/u/train.py", 42, "step"},
       {"/home/u/train.py", 60, "<module>"}},
      // transformers' Trainer: the user's one line calls Trainer.train; the model file's line is
      // the site, via the library frame inside it.
      {{"/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 134, "Linear.forward"},
       {tf + "pytorch_utils.py", 120, "Conv1D.forward"},
       {"/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", 1786, "Module._call_impl"},
       {tf + "models/gpt2/modeling_gpt2.py", 290, "GPT2MLP.forward"},
       {tf + "models/gpt2/modeling_gpt2.py", 400, "GPT2Block.forward"},
       {tf + "trainer.py", 3800, "Trainer.training_step"},
       {tf + "trainer.py", 2200, "Trainer.train"},
       {"/home/u/run.py", 30, "<module>"}},
      // CPython 3.10: no qualified name; the entry is `train` in a trainer.py.
      {{tf + "models/gpt2/modeling_gpt2.py", 290, "forward"},
       {tf + "trainer.py", 2200, "train"},
       {"/home/u/run.py", 30, "<module>"}},
      // Lightning with the user's own LightningModule: the user's model line is innermost.
      {{"/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", 134, "Linear.forward"},
       {"/home/u/lit.py", 12, "Net.training_step"},
       {"/venv/lib/python3.11/site-packages/lightning/pytorch/trainer/trainer.py", 500,
        "Trainer.fit"},
       {"/home/u/lit.py", 40, "<module>"}},
      // The user's line calls a transformers model directly (no trainer): the user's line stays.
      {{tf + "models/gpt2/modeling_gpt2.py", 290, "GPT2MLP.forward"},
       {"/home/u/gen.py", 9, "<module>"}},
  };
  set_library_code("");
  set_model_code("/models/");
  const SiteTable sites(s);
  CHECK(sites.site(0) ==
        "step (train.py:42) via torch::autograd::generated::AddmmBackward0::apply(...) "
        "(libtorch_cpu.so)");
  CHECK(is_autograd_node_frame(s.stacks[0][0]));
  CHECK_FALSE(is_autograd_node_frame(s.stacks[0][1]));
  CHECK(sites.site(1) ==
        "GPT2MLP.forward (modeling_gpt2.py:290) via Linear.forward "
        "(linear.py:134)");
  CHECK(sites.site(2) == "forward (modeling_gpt2.py:290)");
  CHECK(sites.site(3) == "Net.training_step (lit.py:12) via Linear.forward (linear.py:134)");
  CHECK(sites.site(4) == "<module> (gen.py:9) via GPT2MLP.forward (modeling_gpt2.py:290)");
  // Off: the user's trainer line stays the site.
  set_model_code(",");
  CHECK(SiteTable(s).site(1) == "<module> (run.py:30) via Linear.forward (linear.py:134)");
  set_model_code("/models/");
}

TEST_CASE("replay finds the peak and what was live at it", "[model]") {
  const auto s = leaky();
  DeviceReplay r(s, 0);
  CHECK(r.timeline().start_bytes == 0);
  CHECK(r.timeline().trace.bytes == 3 * MiB);
  CHECK(r.timeline().end_bytes == 2 * MiB);
  CHECK(r.timeline().allocations == 2);
  CHECK(r.timeline().frees == 1);
  const auto at_peak = r.live_after(r.timeline().trace.index);
  REQUIRE(at_peak.size() == 2);
  CHECK(at_peak[0].stack == 0);  // stacks come from the alloc entries next to segment_alloc
  CHECK(at_peak[1].stack == 1);
  const auto live = live_at_exit(s);
  REQUIRE(live.size() == 1);
  CHECK(live[0].size == 2 * MiB);
}

TEST_CASE("replay: of two equal highs the peak is the first", "[model]") {
  testing::SnapshotBuilder b;
  const auto first = b.site("first_high", "src/a.cpp", 1);
  const auto second = b.site("second_high", "src/a.cpp", 2);
  b.alloc(0x1000000, 3 * MiB, first);
  b.free(0x1000000);
  b.alloc(0x2000000, 3 * MiB, second);
  b.free(0x2000000);
  const auto s = b.finish();
  DeviceReplay r(s, 0);
  const Timeline& tl = r.timeline();
  CHECK(tl.trace.bytes == 3 * MiB);
  // segment_alloc and its alloc (the same moment) are entries 0 and 1; the second high is 5..6.
  CHECK(tl.trace.index == 1);
  CHECK(tl.trace.time_us == s.device_traces[0][1].time_us);
  const auto at_peak = r.live_after(tl.trace.index);
  REQUIRE(at_peak.size() == 1);
  CHECK(at_peak[0].stack == first);
}

TEST_CASE("a trace window starting mid-run starts from the memory live before it", "[model]") {
  auto s = leaky();
  // Drop the first allocation's two entries: it is now pre-existing, known only from segments.
  auto& tr = s.device_traces[0];
  tr.erase(tr.begin(), tr.begin() + 2);
  DeviceReplay r(s, 0);
  CHECK(r.timeline().start_bytes == 2 * MiB);
  CHECK(r.timeline().trace.bytes == 3 * MiB);
  const auto before = r.live_after(-1);
  REQUIRE(before.size() == 1);
  CHECK(before[0].stack == 0);  // from the segment's block frames
  // Also drop the transient's alloc: its free now releases memory from before the window.
  tr.erase(tr.begin(), tr.begin() + 2);
  DeviceReplay r2(s, 0);
  CHECK(r2.timeline().start_bytes == 3 * MiB);
  CHECK(r2.timeline().trace.bytes == 3 * MiB);
  CHECK(r2.timeline().trace.index == -1);
  CHECK(r2.timeline().end_bytes == 2 * MiB);
  const auto b2 = r2.live_after(-1);
  REQUIRE(b2.size() == 2);
  CHECK(b2[1].before_trace);
}

TEST_CASE("PyTorch fixture: allocated vs reserved, active blocks only", "[model][torch]") {
  const auto s = snap::read_snapshot_any(kFixture);
  const auto& facts = testing::torch_facts();
  CHECK(flavor_of(s) == Flavor::kTorch);
  uint64_t active = 0, active_blocks = 0, reserved = 0;
  for (const auto& g : s.segments) {
    reserved += g.total_size;
    for (const auto& b : g.blocks) {
      active += b.state == "active_allocated" ? b.requested_size : 0;
      active_blocks += b.state == "active_allocated" ? b.size : 0;
    }
  }
  // PyTorch's own memory_reserved() and memory_allocated() (block bytes) at the snapshot.
  CHECK(reserved == facts["memory_reserved"].get<uint64_t>());
  CHECK(active_blocks == facts["memory_allocated"].get<uint64_t>());
  // What the live tensors asked for, as PyTorch recorded them (facts.json, not our reader).
  CHECK(active == facts["active_requested_bytes"].get<uint64_t>());
  const auto live = live_at_exit(s);
  CHECK(live.size() == facts["active_blocks"].get<size_t>());
  CHECK(total_bytes(live) == active);
  DeviceReplay r(s, 0);
  const Timeline& tl = r.timeline();
  CHECK(tl.has_reserved);
  CHECK(tl.reserved_end_bytes == reserved);
  CHECK(tl.end_bytes == active);  // the replay lands exactly on the end state
  CHECK(tl.trace.bytes >= tl.end_bytes);
  CHECK(tl.trace.bytes >= tl.start_bytes);
  CHECK(tl.reserved.bytes >= tl.trace.bytes);
  // The snapshot entry reports PyTorch's own allocated total at the end.
  const SiteTable sites(s);
  const auto rep = build_report(s, sites, "fixture");
  REQUIRE(rep.devices.size() == 1);
  CHECK(rep.devices[0].live_at_exit_bytes == active);
  CHECK(!rep.top_by_bytes.empty());
  for (const auto& st : rep.top_by_bytes)
    CHECK(st.site.find("CUDACachingAllocator") == std::string::npos);
}

TEST_CASE("suppressions: LSan-like patterns", "[suppressions]") {
  CHECK(pattern_matches("allocate_weights", "void allocate_weights(int)"));
  CHECK(pattern_matches("^allocate", "allocate_weights"));
  CHECK_FALSE(pattern_matches("^weights", "allocate_weights"));
  CHECK(pattern_matches("weights$", "allocate_weights"));
  CHECK_FALSE(pattern_matches("allocate$", "allocate_weights"));
  CHECK(pattern_matches("alloc*weights", "allocate_weights"));
  CHECK(pattern_matches("^*$", ""));
  CHECK(pattern_matches("*a*b*c*", "xxaxxbxxcxx"));
  CHECK_FALSE(pattern_matches("*a*b*c*d", "xxaxxbxxcxx"));
  const auto rules = parse_suppressions(
      "# comment\n\nleak:allocate_weights\n  growth: src/cache.cpp  \r\nleak:^libfoo.so$\n",
      "s.supp");
  REQUIRE(rules.size() == 3);
  CHECK(rules[1].type == SuppressionType::kGrowth);
  CHECK(rules[1].pattern == "src/cache.cpp");
  CHECK(rules[2].source == "s.supp:5");
  CHECK_THROWS_WITH(parse_suppressions("leak:x\nleek:y\n", "s.supp"),
                    "s.supp:2: expected `leak:PATTERN` or `growth:PATTERN`");
  CHECK_THROWS_WITH(parse_suppressions("leak:\n", "s.supp"),
                    "s.supp:1: expected a pattern after `leak:`");
  CHECK_THROWS_WITH(parse_suppressions("leak\n", "s.supp"), Catch::Contains("s.supp:1: expected"));
  const auto s = leaky();
  CHECK(find_suppression(rules, SuppressionType::kLeak, s, 0) == &rules[0]);
  CHECK(find_suppression(rules, SuppressionType::kLeak, s, 1) == nullptr);
  CHECK(find_suppression(rules, SuppressionType::kGrowth, s, 0) == nullptr);
}

TEST_CASE("check: leaks", "[check]") {
  const auto s = leaky();
  CheckOptions o;
  o.max_leaked_bytes = 0;
  std::string text;
  CHECK(check(s, o, &text) == 1);
  CHECK(text.find("traces/app.1234.json: error: 2.00 MiB leaked on device 0 by 1 allocation "
                  "(limit 0 B)\n    at allocate_weights (tests/programs/scenarios.cpp:42)\n") !=
        std::string::npos);
  CHECK(text.find("cumemtrace check: 1 failed, 1 passed") != std::string::npos);
  o.max_leaked_bytes = 2 * MiB;
  CHECK(check(s, o, &text) == 0);
  CHECK(text.find("traces/app.1234.json: ok: 2 checks passed") != std::string::npos);
}

TEST_CASE("check --range: leaks are what the window allocated and kept", "[check]") {
  testing::SnapshotBuilder b;
  b.alloc(0x1000000, 2 * MiB, b.site("before_window", "src/a.cpp", 1));
  b.annotate("pytest:t", "START");
  b.alloc(0x2000000, 1 * MiB, b.site("kept_in_window", "src/a.cpp", 2));
  b.alloc(0x3000000, 512 * 1024, b.site("freed_in_window", "src/a.cpp", 3));
  b.free(0x3000000);
  b.annotate("pytest:t", "END");
  b.alloc(0x4000000, 4 * MiB, b.site("after_window", "src/a.cpp", 4));
  const auto s = b.finish();
  CheckOptions o;
  o.max_leaked_bytes = 0;
  o.range = "pytest:t";
  std::string text;
  CHECK(check(s, o, &text) == 1);
  CHECK_THAT(text, Catch::Contains("error: 1.00 MiB leaked on device 0 within range 'pytest:t' "
                                   "by 1 allocation (limit 0 B)\n    at kept_in_window "
                                   "(src/a.cpp:2)\n"));
  o.max_leaked_bytes = 1 * MiB;
  CHECK(check(s, o, &text) == 0);
  // Without the range the whole run's 7 MiB is judged.
  o.range.clear();
  CHECK(check(s, o, &text) == 1);
  CHECK_THAT(text, Catch::Contains("error: 7.00 MiB leaked on device 0 by 3 allocations"));
}

TEST_CASE("check: PyTorch blocks pending their free are no leak, cached blocks neither",
          "[check]") {
  testing::SnapshotBuilder b;
  const auto st = b.site("forward", "model.py", 7);
  auto s = b.finish();
  snap::Segment g;
  g.source = snap::Source::kPytorch;
  g.address = 0x7000000;
  g.total_size = 2 * MiB;
  g.blocks = {{0x7000000, 512 * 1024, 512 * 1024, "active_allocated", st},
              {0x7080000, 256 * 1024, 256 * 1024, "active_pending_free", st},
              {0x70c0000, 1280 * 1024, 0, "inactive", -1}};
  s.segments.push_back(g);
  const auto live = live_at_exit(s);
  REQUIRE(live.size() == 1);
  CHECK(live[0].size == 512 * 1024);
  CheckOptions o;
  o.max_leaked_bytes = 0;
  std::string text;
  CHECK(check(s, o, &text) == 1);
  CHECK_THAT(text,
             Catch::Contains("error: 512 KiB leaked on device 0 by 1 allocation (limit 0 B)"));
  o.max_leaked_bytes = 512 * 1024;
  CHECK(check(s, o) == 0);
}

TEST_CASE("check: leak suppressions", "[check][suppressions]") {
  const auto dir = std::filesystem::temp_directory_path() / "cumemtrace-analysis-test";
  std::filesystem::create_directories(dir);
  const auto supp = (dir / "leaks.supp").string();
  {
    std::ofstream f(supp);
    f << "# known: weights live for the whole run\nleak:allocate_weights\n";
  }
  CheckOptions o;
  o.max_leaked_bytes = 0;
  o.suppressions = supp;
  std::string text;
  CHECK(check(leaky(), o, &text) == 0);
  CHECK(text.find("Suppressions used:") != std::string::npos);
  CHECK(text.find("2.00 MiB  allocate_weights (" + supp + ":2)") != std::string::npos);
  {
    std::ofstream f(supp);
    f << "leak:main\n";  // an outer frame matches too
  }
  CHECK(check(leaky(), o) == 0);
  {
    std::ofstream f(supp);
    f << "leak:something_else\n";
  }
  CHECK(check(leaky(), o) == 1);
  {
    std::ofstream f(supp);
    f << "lek:allocate_weights\n";
  }
  CHECK(check(leaky(), o, &text) == 2);
  CHECK(text.find(supp + ":1: expected `leak:PATTERN`") != std::string::npos);
  o.suppressions = (dir / "missing.supp").string();
  CHECK(check(leaky(), o) == 2);
  std::filesystem::remove_all(dir);
}

TEST_CASE("check: peak", "[check]") {
  CheckOptions o;
  o.max_peak_bytes = 3 * MiB - 1;
  std::string text;
  CHECK(check(leaky(), o, &text) == 1);
  CHECK(text.find("error: peak 3.00 MiB on device 0") != std::string::npos);
  CHECK(text.find("2.00 MiB live in 1 allocation from allocate_weights") != std::string::npos);
  CHECK(text.find("1.00 MiB live in 1 allocation from scratch") != std::string::npos);
  o.max_peak_bytes = 3 * MiB;
  CHECK(check(leaky(), o) == 0);
}

TEST_CASE("check: growth between marks", "[check][marks]") {
  CheckOptions o;
  o.max_growth = 0;
  o.mark = "step";
  std::string text;
  // Steady state: a 4 MiB scratch buffer per step, freed again.
  CHECK(check(growing(0), o, &text) == 0);
  // 1 MiB per step kept: 6 marks, warmup 1 -> measured from mark 2 to mark 6 = 4 steps.
  CHECK(check(growing(MiB), o, &text) == 1);
  CHECK(text.find("grew by +4.00 MiB between occurrences 2 and 6 of mark 'step'") !=
        std::string::npos);
  CHECK(text.find("+4.00 MiB grew at grow_cache (cache.cpp:10)") != std::string::npos);
  CHECK(text.find("step_scratch") == std::string::npos);
  o.max_growth = 4 * MiB;
  CHECK(check(growing(MiB), o) == 0);
  o.max_growth = 0;
  o.warmup = 4;  // from mark 5 to mark 6: one step
  CHECK(check(growing(MiB), o, &text) == 1);
  CHECK(text.find("grew by +1.00 MiB between occurrences 5 and 6") != std::string::npos);
  o.warmup = 5;  // only one occurrence left to measure: cannot judge
  CHECK(check(growing(MiB), o, &text) == 1);
  CHECK(text.find("mark 'step' occurs 6 times; --max-growth with --warmup 5 needs at least 7") !=
        std::string::npos);
  o.warmup = 1;
  o.mark = "no-such-mark";
  CHECK(check(growing(MiB), o) == 1);
  o.mark.clear();  // the automatic steps, which this snapshot lacks: cannot judge, fails
  CHECK(check(growing(MiB), o, &text) == 1);
  CHECK(text.find("0 automatic steps are complete; --max-growth with --warmup 1 needs at least 3 "
                  "(the snapshot has no automatic steps: give --mark NAME)") != std::string::npos);
}

TEST_CASE("check: growth suppressions", "[check][marks][suppressions]") {
  const auto dir = std::filesystem::temp_directory_path() / "cumemtrace-analysis-growth";
  std::filesystem::create_directories(dir);
  const auto supp = (dir / "g.supp").string();
  {
    std::ofstream f(supp);
    f << "growth:grow_cache\nleak:grow_cache\n";
  }
  CheckOptions o;
  o.max_growth = 0;
  o.mark = "step";
  o.suppressions = supp;
  CHECK(check(growing(MiB), o) == 0);
  std::filesystem::remove_all(dir);
}

TEST_CASE("check: dropped events fail as incomplete unless allowed", "[check][drops]") {
  testing::SnapshotBuilder b;
  b.alloc(0x1000, 10, b.site("f", "a.cpp", 1));
  b.free(0x1000);
  b.drops(5);
  const auto s = b.finish();
  CheckOptions o;
  o.max_leaked_bytes = 0;
  std::string text;
  CHECK(check(s, o, &text) == 1);
  CHECK(text.find("error: incomplete: 5 of 7 events dropped") != std::string::npos);
  o.allow_drops = true;
  CHECK(check(s, o, &text) == 0);
  CHECK(text.find("warning: incomplete: 5 of 7 events dropped") != std::string::npos);
}

TEST_CASE("check: a ring read to a corrupt record fails as incomplete, even with drops allowed",
          "[check][drops]") {
  testing::SnapshotBuilder b;
  b.alloc(0x1000, 10, b.site("f", "a.cpp", 1));
  auto s = b.finish();
  s.tool->ring_error = "corrupt ring from pid 7: record 3 claims 200 continuation slots";
  CheckOptions o;
  o.allow_drops = true;
  std::string text;
  CHECK(check(s, o, &text) == 1);
  CHECK(text.find("error: incomplete: corrupt ring from pid 7: record 3 claims 200 continuation "
                  "slots; the 1 events before it were recorded, later ones are missing") !=
        std::string::npos);
  s.tool->ring_error.clear();
  CHECK(check(s, o, &text) == 0);
}

TEST_CASE("check: anomalies are warnings", "[check]") {
  testing::SnapshotBuilder b;
  const auto st = b.site("release_twice", "a.cpp", 9);
  b.anomaly("double_free", 0xdead0000, st);
  CheckOptions o;
  o.max_leaked_bytes = 0;
  std::string text;
  CHECK(check(b.finish(), o, &text) == 0);
  CHECK(
      text.find("warning: double_free of 0xdead0000 (cudaFree)\n    at release_twice (a.cpp:9)") !=
      std::string::npos);
}

TEST_CASE("check output formats", "[check][formats]") {
  CheckOptions o;
  o.max_leaked_bytes = 0;
  const auto r = evaluate_check({{"traces/app.1234.json", leaky()}}, o);
  REQUIRE(r.failures() == 1);

  std::ostringstream gh;
  write_github(r, gh);
  CHECK(gh.str().rfind("::error file=tests/programs/scenarios.cpp,line=42,title=cumemtrace "
                       "leaked-bytes::traces/app.1234.json: 2.00 MiB leaked on device 0 by 1 "
                       "allocation (limit 0 B)%0A    at allocate_weights "
                       "(tests/programs/scenarios.cpp:42)",
                       0) == 0);

  std::ostringstream xml;
  write_junit(r, xml);
  CHECK(xml.str().find("<testsuites name=\"cumemtrace check\" tests=\"2\" failures=\"1\"") !=
        std::string::npos);
  CHECK(xml.str().find("<testcase classname=\"cumemtrace.traces/app.1234.json\" "
                       "name=\"leaked-bytes (device 0)\"") != std::string::npos);
  CHECK(xml.str().find("<failure message=\"2.00 MiB leaked on device 0 by 1 allocation (limit 0 "
                       "B)\" type=\"leaked-bytes\">") != std::string::npos);

  std::ostringstream js;
  write_check_json(r, js);
  const auto j = nlohmann::json::parse(js.str());
  CHECK(j["ok"] == false);
  CHECK(j["files"][0]["checks"][1]["check"] == "leaked-bytes");
  CHECK(j["files"][0]["checks"][1]["value"] == 2 * MiB);
  CHECK(j["files"][0]["checks"][1]["stacks"][0]["line"] == 42);
}

TEST_CASE("junit escapes what XML cannot hold", "[check][formats]") {
  CheckResult r;
  r.snapshots = {"a&b<\"c\">.json"};
  Finding f;
  f.snapshot = r.snapshots[0];
  f.check = "leaked-bytes";
  f.severity = Severity::kError;
  f.message = "x\x01y <z>";
  r.findings.push_back(f);
  std::ostringstream xml;
  write_junit(r, xml);
  CHECK(xml.str().find("name=\"a&amp;b&lt;&quot;c&quot;&gt;.json\"") != std::string::npos);
  CHECK(xml.str().find("message=\"xy &lt;z&gt;\"") != std::string::npos);
  CHECK(xml.str().find('\x01') == std::string::npos);
}

TEST_CASE("report text and json", "[report]") {
  const auto s = leaky();
  const SiteTable sites(s);
  const auto r = build_report(s, sites, "app.json");
  std::ostringstream text, js;
  print_report_text(r, s, sites, {}, text);
  print_report_json(r, s, sites, {}, js);
  CHECK(text.str().find("peak device memory: 3.00 MiB at +0.000020 s") != std::string::npos);
  CHECK(text.str().find("live at exit: 2.00 MiB in 1 allocation") != std::string::npos);
  CHECK(text.str().find("events: 3 recorded, 0 dropped") != std::string::npos);
  const auto j = nlohmann::json::parse(js.str());
  CHECK(j["devices"][0]["peak_bytes"] == 3 * MiB);
  CHECK(j["devices"][0]["live_at_exit"][0]["site"] == "allocate_weights (scenarios.cpp:42)");
  CHECK(j["size_histogram"].size() == 2);
  CHECK(j["top_sites_by_bytes"][0]["bytes"] == 2 * MiB);
}

TEST_CASE("diff: per device and per site", "[diff]") {
  const auto d = diff_snapshots(growing(0), "base.json", growing(MiB), "new.json");
  REQUIRE(d.devices.size() == 1);
  CHECK(d.devices[0].base_live == 0);
  CHECK(d.devices[0].new_live == 5 * MiB);
  CHECK(d.devices[0].new_peak == 9 * MiB);
  CHECK(d.devices[0].base_peak == 4 * MiB);
  REQUIRE(!d.sites.empty());
  CHECK(d.sites[0].site == "grow_cache (cache.cpp:10)");
  CHECK(d.sites[0].new_live == 5 * MiB);
  CHECK(d.sites[0].new_count == 5);
  std::ostringstream text;
  print_diff_text(d, 10, text);
  CHECK(text.str().find("live at exit: 0 B -> 5.00 MiB  +5.00 MiB") != std::string::npos);
  CHECK(text.str().find("peak:         4.00 MiB -> 9.00 MiB  +5.00 MiB (+125.0%)") !=
        std::string::npos);
  const auto same = diff_snapshots(leaky(), "a", leaky(), "b");
  CHECK(same.sites.empty());
}

TEST_CASE("VMM: held handles leak once, their mappings are not counted again", "[model][check]") {
  testing::SnapshotBuilder b;
  const auto st = b.site("reserve_pool", "src/pool.cpp", 12);
  auto s = b.finish();
  s.tool->vmm_handles.push_back({0x42, 2 * MiB, 0, st, 1000100});
  snap::Segment mapped;
  mapped.address = 0x7f0000000000;
  mapped.total_size = 2 * MiB;
  mapped.is_expandable = true;
  mapped.blocks.push_back({mapped.address, 2 * MiB, 2 * MiB, "active_allocated", st});
  s.segments.push_back(mapped);
  const auto live = live_at_exit(s);
  REQUIRE(live.size() == 1);
  CHECK(live[0].size == 2 * MiB);
  CheckOptions o;
  o.max_leaked_bytes = 0;
  std::string text;
  CHECK(check(s, o, &text) == 1);
  CHECK(text.find("2.00 MiB leaked on device 0 by 1 allocation (limit 0 B)\n    at reserve_pool "
                  "(src/pool.cpp:12)") != std::string::npos);
}

TEST_CASE("the collector summary's watermark stands beside the trace's, neither overrides",
          "[model][check]") {
  auto s = leaky();
  s.tool->devices.push_back({0, 8 * MiB, 1000005, 2 * MiB, 3, 1});
  DeviceReplay r(s, 0);
  const Timeline& tl = r.timeline();
  CHECK(tl.trace.bytes == 3 * MiB);  // the trace's own highest point, kept
  CHECK(tl.trace.index == 3);        // the scratch tensor's alloc entry
  REQUIRE(tl.collector_summary);
  CHECK(tl.collector_summary->bytes == 8 * MiB);
  CHECK(tl.collector_summary->time_us == 1000005);
  CHECK(tl.collector_summary->index == -1);  // no moment of the trace
  CHECK(tl.summary_higher());
  CHECK(tl.highest_known().bytes == 8 * MiB);
  // report names each by its source; its JSON's peak is the highest known (the format's field).
  {
    const SiteTable sites(s);
    const auto rep = build_report(s, sites, "app.json");
    std::ostringstream text, js;
    print_report_text(rep, s, sites, {}, text);
    print_report_json(rep, s, sites, {}, js);
    CHECK(text.str().find(
              "  peak device memory: 8.00 MiB at +0.000005 s (the collector's summary of all "
              "events)\n"
              "  the trace's highest point: 3.00 MiB at +0.000020 s (the trace holds less; \"live "
              "at the peak\" shows this moment)\n") != std::string::npos);
    CHECK(nlohmann::json::parse(js.str())["devices"][0]["peak_bytes"] == 8 * MiB);
  }
  s.tool->devices[0].peak_bytes = MiB;  // lower than the trace's: the trace is the highest known
  const DeviceReplay r2(s, 0);
  CHECK(r2.timeline().collector_summary->bytes == MiB);
  CHECK_FALSE(r2.timeline().summary_higher());
  CHECK(r2.timeline().highest_known().bytes == 3 * MiB);
}

TEST_CASE("check --max-peak-bytes judges the higher known watermark and names whose it is",
          "[model][check]") {
  auto s = leaky();
  s.tool->devices.push_back({0, 8 * MiB, 1000005, 2 * MiB, 3, 1});
  CheckOptions o;
  o.max_peak_bytes = 4 * MiB;
  std::string text;
  CHECK(check(s, o, &text) == 1);
  CHECK(text ==
        "traces/app.1234.json: error: peak 8.00 MiB on device 0 at +0.000005 s (limit 4.00 MiB; "
        "the collector's summary of all events, the trace holds 3.00 MiB); at the trace's highest "
        "point, +0.000020 s:\n"
        "  2.00 MiB live in 1 allocation from allocate_weights (scenarios.cpp:42):\n"
        "    at allocate_weights (tests/programs/scenarios.cpp:42)\n"
        "    at main (tests/programs/scenarios.cpp:142)\n"
        "  1.00 MiB live in 1 allocation from scratch (scenarios.cpp:60):\n"
        "    at scratch (tests/programs/scenarios.cpp:60)\n"
        "    at main (tests/programs/scenarios.cpp:160)\n"
        "traces/app.1234.json: FAILED: 1 of 2 checks failed\n"
        "cumemtrace check: 1 failed, 1 passed\n");
  auto peak_finding = [&]() {
    const auto r = evaluate_check({{"t.json", s}}, o);
    for (const auto& f : r.findings)
      if (f.check == "peak-bytes") return f;
    FAIL("no peak-bytes finding");
    return Finding{};
  };
  o.max_peak_bytes = 8 * MiB;  // the summary's 8 MiB is within it: passes, naming both
  text.clear();
  CHECK(check(s, o, &text) == 0);
  auto f = peak_finding();
  CHECK(f.value == 8 * MiB);
  CHECK(f.message ==
        "peak 8.00 MiB on device 0 at +0.000005 s (limit 8.00 MiB; the collector's summary of "
        "all events, the trace holds 3.00 MiB)");
  // A capped trace whose summary knew no more: the trace holds the highest point.
  s.tool->trace_entries_dropped = 5;
  s.tool->devices[0].peak_bytes = 3 * MiB;
  o.max_peak_bytes = 4 * MiB;
  text.clear();
  CHECK(check(s, o, &text) == 0);
  f = peak_finding();
  CHECK(f.judged);
  CHECK(f.value == 3 * MiB);
  CHECK(f.message == "peak 3.00 MiB on device 0 at +0.000020 s (limit 4.00 MiB)");
}

TEST_CASE("check --max-peak-bytes cannot judge a trace that lost entries no summary covers",
          "[model][check]") {
  // The collector's cap dropped entries and the file has no summary of the device.
  auto s = leaky();
  s.tool->trace_entries_dropped = 5;
  s.allocator_settings["max_trace_events"] = "2";
  s.tool->devices.clear();
  CheckOptions o;
  o.max_peak_bytes = 4 * MiB;
  std::string text;
  CHECK(check(s, o, &text) == 1);
  CHECK(text ==
        "traces/app.1234.json: error: --max-peak-bytes cannot be judged on device 0: the oldest 5 "
        "trace entries were dropped (--max-trace-events 2), and no collector summary of all "
        "events covers them (the trace's highest point is 3.00 MiB at +0.000020 s)\n"
        "traces/app.1234.json: FAILED: 1 of 2 checks failed\n"
        "cumemtrace check: 1 failed, 1 passed\n");
  // PyTorch's own file (the real fixture) whose ring of max_entries overflowed: torch versions
  // after 2.11 say so in allocator_settings.
  auto t = snap::read_snapshot_any(kFixture);
  t.allocator_settings["trace_alloc_overflowed"] = "true";
  t.allocator_settings["trace_alloc_max_entries"] = "1500";
  o.max_peak_bytes = uint64_t{1} << 40;
  text.clear();
  CHECK(check(t, o, &text) == 1);
  CHECK(text ==
        "traces/app.1234.json: error: --max-peak-bytes cannot be judged on device 0: PyTorch's "
        "trace overflowed its max_entries (1500), so its oldest entries were dropped, and no "
        "collector summary of all events covers them (the trace's highest point is 104 MiB at "
        "+0.007516 s)\n"
        "traces/app.1234.json: FAILED: 1 of 1 check failed\n"
        "cumemtrace check: 1 failed, 0 passed\n");
  t.allocator_settings["trace_alloc_overflowed"] = "false";
  text.clear();
  CHECK(check(t, o, &text) == 0);
}

TEST_CASE("github annotations use paths relative to $GITHUB_WORKSPACE", "[check][formats]") {
  testing::SnapshotBuilder b;
  b.alloc(0x1000, 64, b.site("leaky", "/home/runner/work/app/app/src/leaky.cpp", 7));
  CheckOptions o;
  o.max_leaked_bytes = 0;
  const auto r = evaluate_check({{"t.json", b.finish()}}, o);
  ::setenv("GITHUB_WORKSPACE", "/home/runner/work/app/app", 1);
  std::ostringstream gh;
  write_github(r, gh);
  ::unsetenv("GITHUB_WORKSPACE");
  CHECK(gh.str().rfind("::error file=src/leaky.cpp,line=7,", 0) == 0);
  std::ostringstream plain;
  write_github(r, plain);
  CHECK(plain.str().rfind("::error file=/home/runner/work/app/app/src/leaky.cpp,line=7,", 0) == 0);
}

TEST_CASE("a live count says what it is made of: tensors, driver allocations, or both",
          "[report]") {
  std::vector<Allocation> live;
  CHECK(live_count_text(count_live(live)) == "0 allocations");
  live.push_back({0, 0x1000, 3 * MiB, snap::kNoStack, false, false, 0, false});
  CHECK(live_count_text(count_live(live)) == "1 allocation");
  live.clear();
  live.push_back({0, 0x1000, 48 * MiB, snap::kNoStack, false, true, 0, false});
  CHECK(live_count_text(count_live(live)) == "1 PyTorch tensor");
  live.push_back({0, 0x4000000, 17 * MiB, snap::kNoStack, false, true, 0, false});
  live.push_back({0, 0x9000000, 64 * MiB + 512 * 1024, snap::kNoStack, false, false, 0, false});
  const LiveCount c = count_live(live);
  CHECK((c.count == 3 && c.pytorch == 2 && c.pytorch_bytes == 65 * MiB &&
         c.bytes == 129 * MiB + 512 * 1024));
  CHECK(live_count_text(c) ==
        "3 allocations: 2 PyTorch tensors (65.0 MiB) and 1 driver allocation (64.5 MiB)");
}
