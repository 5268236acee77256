// Phases (phases.h) and categories (categories.h) of PyTorch runs built by hand: spans, steps,
// micro-steps, nesting, inference, autograd threads, and each category rule with its edge cases
// (gradient accumulation, checkpoint recompute, an ownership pointer inside a block, a walk at the
// very microsecond of a free, an address re-used after a walk).
#include <catch2/catch.hpp>

#include <limits>

#include "pytorch/categories.h"
#include "pytorch/phases.h"
#include "support/torch_run_builder.h"

using namespace cumemtrace;
using namespace cumemtrace::analysis;
using snap::Category;
using testing::TorchRunBuilder;

namespace {

constexpr uint64_t MiB = 1 << 20;
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

// Category of the entries at `addr` with action `a` (each must be labelled alike).
std::vector<Category> cats(const snap::Snapshot& s, uint64_t addr) {
  std::vector<Category> out;
  for (const auto& e : s.device_traces[0])
    if (e.addr == addr && e.source == snap::Source::kPytorch &&
        (e.action == snap::Action::kAlloc || e.action == snap::Action::kFreeRequested ||
         e.action == snap::Action::kFreeCompleted))
      out.push_back(e.category);
  return out;
}

Category cat(const snap::Snapshot& s, uint64_t addr) {
  const auto v = cats(s, addr);
  REQUIRE(!v.empty());
  for (auto c : v) REQUIRE(c == v.front());
  return v.front();
}

}  // namespace

TEST_CASE("phases: spans, steps, and the stretches between intervals named", "[phases]") {
  TorchRunBuilder b;
  b.phase(100, 200, "auto:forward");
  b.phase(210, 300, "auto:backward");
  b.phase(310, 400, "auto:optimizer");
  b.mark(400, "auto:step");
  b.phase(500, 600, "auto:forward");
  b.start(610, "auto:backward");  // the snapshot was written inside it
  b.mark(50, "user mark");        // user marks are not phases
  const Phases p(b.finish());
  REQUIRE(p.automatic());
  REQUIRE(p.training());
  const auto& sp = p.spans();
  REQUIRE(sp.size() == 9);
  struct Want {
    Phase phase;
    int64_t begin, end;
    int step, micro;
    bool ended;
  };
  // setup before the first interval; loss after a forward; the stretch between backward and the
  // optimizer step joins the step; data before the next step's forward
  const std::vector<Want> want = {
      {Phase::kSetup, kMin, 100, 0, -1, true},    {Phase::kForward, 100, 201, 0, 0, true},
      {Phase::kLoss, 201, 210, 0, 0, true},       {Phase::kBackward, 210, 301, 0, 0, true},
      {Phase::kOptimizer, 301, 401, 0, -1, true}, {Phase::kData, 401, 500, 1, -1, true},
      {Phase::kForward, 500, 601, 1, 0, true},    {Phase::kLoss, 601, 610, 1, 0, true},
  };
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("span " << i);
    CHECK(sp[i].phase == want[i].phase);
    CHECK(sp[i].begin_us == want[i].begin);
    CHECK(sp[i].end_us == want[i].end);
    CHECK(sp[i].step == want[i].step);
    CHECK(sp[i].micro == want[i].micro);
    CHECK(sp[i].ended == want[i].ended);
  }
  CHECK(sp[8].phase == Phase::kBackward);  // the unfinished one runs to the end
  CHECK(sp[8].begin_us == 610);
  CHECK(sp[8].end_us == kMax);
  CHECK(sp[8].step == 1);
  CHECK(sp[8].micro == 0);
  CHECK_FALSE(sp[8].ended);
  const auto& steps = p.steps();
  REQUIRE(steps.size() == 2);
  CHECK(steps[0].begin_us == kMin);
  CHECK(steps[0].end_us == 401);
  CHECK(steps[0].complete);
  CHECK(steps[1].begin_us == 401);
  CHECK(steps[1].end_us == kMax);
  CHECK_FALSE(steps[1].complete);
  CHECK(p.complete_steps() == 1);
  CHECK(p.step_at(400) == 0);  // the MARK's microsecond still belongs to the step it ends
  CHECK(p.step_at(401) == 1);
  CHECK(p.span_at(200) == 1);  // END's microsecond is inside the interval
  CHECK(p.span_at(201) == 2);
  for (const auto& x : sp) CHECK(phase_name(x.phase) != "other");
}

TEST_CASE("phases: the unfinished interval runs to the end", "[phases]") {
  TorchRunBuilder b;
  b.phase(100, 200, "auto:forward");
  b.start(300, "auto:backward");
  const Phases p(b.finish());
  REQUIRE(p.spans().size() == 4);
  CHECK(p.spans()[3].phase == Phase::kBackward);
  CHECK(p.spans()[3].begin_us == 300);
  CHECK(p.spans()[3].end_us == kMax);
  CHECK_FALSE(p.spans()[3].ended);
  CHECK(p.training());  // a backward makes it training, with no step completed yet
  CHECK(p.steps().size() == 1);
  CHECK(p.complete_steps() == 0);
}

TEST_CASE("phases: micro-steps of gradient accumulation are counted", "[phases]") {
  TorchRunBuilder b;
  for (int s = 0; s < 2; ++s) {
    const int64_t t = 1000 * s;
    b.phase(t + 100, t + 150, "auto:forward");
    b.phase(t + 200, t + 250, "auto:backward");
    b.phase(t + 300, t + 350, "auto:forward");
    b.phase(t + 400, t + 450, "auto:backward");
    b.phase(t + 500, t + 550, "auto:optimizer");
    b.mark(t + 550, "auto:step");
  }
  const Phases p(b.finish());
  REQUIRE(p.steps().size() == 3);
  CHECK(p.complete_steps() == 2);
  CHECK(p.steps()[0].micro_steps == 2);
  CHECK(p.steps()[1].micro_steps == 2);
  CHECK(p.steps()[2].micro_steps == 0);
  std::vector<std::pair<Phase, int>> got;
  for (const auto& sp : p.spans())
    if (sp.step == 1 && !gap_phase(sp.phase)) got.push_back({sp.phase, sp.micro});
  const std::vector<std::pair<Phase, int>> want = {
      {Phase::kForward, 0}, {Phase::kLoss, 0},     {Phase::kBackward, 0},  {Phase::kForward, 1},
      {Phase::kLoss, 1},    {Phase::kBackward, 1}, {Phase::kOptimizer, -1}};
  CHECK(got == want);
}

TEST_CASE("phases: a forward inside backward (checkpoint recompute) is backward", "[phases]") {
  TorchRunBuilder b;
  b.phase(100, 200, "auto:forward");
  b.start(300, "auto:backward");
  b.phase(320, 340, "auto:forward");
  b.end(400, "auto:backward");
  const Phases p(b.finish());
  REQUIRE(p.spans().size() == 5);
  CHECK(p.spans()[3].phase == Phase::kBackward);
  CHECK(p.spans()[3].begin_us == 300);
  CHECK(p.spans()[3].end_us == 401);
  CHECK(p.steps().front().micro_steps == 1);
}

TEST_CASE("phases: inference has an iteration per forward", "[phases]") {
  TorchRunBuilder b;
  b.phase(100, 200, "auto:forward");
  b.phase(300, 400, "auto:forward");
  b.phase(500, 600, "auto:forward");
  const Phases p(b.finish());
  REQUIRE(p.automatic());
  CHECK_FALSE(p.training());
  REQUIRE(p.steps().size() == 3);
  CHECK(p.steps()[0].end_us == 300);
  CHECK(p.steps()[1].begin_us == 300);
  CHECK(p.steps()[2].begin_us == 500);
  CHECK(p.complete_steps() == 2);
  CHECK(p.step_at(299) == 0);
  CHECK(p.step_at(300) == 1);
}

TEST_CASE("phases: none without auto marks; autograd threads are backward", "[phases]") {
  TorchRunBuilder b;
  b.start(10, "epoch");
  b.end(20, "epoch");
  const Phases none(b.finish());
  CHECK_FALSE(none.automatic());
  CHECK(none.spans().size() == 1);
  CHECK(none.steps().size() == 1);
  CHECK(none.complete_steps() == 0);

  b.phase(100, 200, "auto:forward");
  const Phases p(b.finish());
  snap::TraceEntry e;
  e.time_us = 150;
  e.tid = TorchRunBuilder::kMainTid;
  CHECK(p.of(e).phase == Phase::kForward);
  e.tid = TorchRunBuilder::kAutogradTid;  // named pt_autograd_0
  CHECK(p.of(e).phase == Phase::kBackward);
  e.time_us = 50;
  CHECK(p.of(e).phase == Phase::kBackward);
  CHECK(p.of(e).span == 0);
}

TEST_CASE("categories: one training step, every rule", "[categories]") {
  TorchRunBuilder b;
  const auto ln = b.line("train.py", 10);
  const auto lib = b.native("libcublasLt.so.12", "cublasLtMatmul");
  b.segment(10, 0x100000000, 64 * MiB);
  b.alloc(20, 0x100000000, 4 * MiB, ln);  // W: parameter (model.cuda())
  b.alloc(30, 0x100400000, 1 * MiB, ln);  // X: input
  b.alloc(35, 0x100500000, 1 * MiB, ln);  // other, freed in other: temporary
  b.free(36, 0x100500000);
  b.alloc(37, 0x100600000, 1 * MiB, ln);  // other, freed in forward: input all the same
  b.library(38, 0x200000000, 8 * MiB, lib);
  b.phase(40, 80, "auto:forward");
  b.free(45, 0x100600000);
  b.alloc(50, 0x100700000, 2 * MiB, ln);  // A: activation, freed by backward
  b.alloc(60, 0x100900000, 1 * MiB, ln);  // T: temporary
  b.free(70, 0x100900000);
  b.alloc(75, 0x100a00000, 1 * MiB, ln);  // an output dropped before backward: activation
  b.alloc(78, 0x100b00000, 1 * MiB, ln);  // the loss: alive into backward, activation
  b.free(85, 0x100a00000);
  b.phase(90, 130, "auto:backward");
  b.alloc(100, 0x100c00000, 4 * MiB, ln, TorchRunBuilder::kAutogradTid);  // G: gradient
  b.alloc(110, 0x101000000, 1 * MiB, ln, TorchRunBuilder::kAutogradTid);  // temporary
  b.free(120, 0x101000000, TorchRunBuilder::kAutogradTid);
  b.alloc(121, 0x101100000, 1 * MiB, ln, TorchRunBuilder::kAutogradTid);  // autograd's own
  b.free(125, 0x100700000, TorchRunBuilder::kAutogradTid);
  b.free(126, 0x100b00000, TorchRunBuilder::kAutogradTid);
  b.alloc(132, 0x101200000, 1 * MiB, ln, TorchRunBuilder::kAutogradTid);  // after END, its thread
  b.alloc(133, 0x101d00000, 1 * MiB, ln);  // before the step (clipping): optimizer's, unknown
  b.free(135, 0x100400000);
  b.phase(140, 160, "auto:optimizer");
  b.alloc(150, 0x101300000, 8 * MiB, ln);  // S: optimizer state
  b.alloc(155, 0x101b00000, 1 * MiB, ln);  // temporary
  b.free(158, 0x101b00000);
  b.alloc(159, 0x101c00000, 1 * MiB, ln);  // kept after the step, no owner: unknown
  b.walk(45, snap::OwnerRole::kParameter, {{0x100000000 + 1024, 4 * MiB - 1024}});  // a view
  b.walk(160, snap::OwnerRole::kGradient, {{0x100c00000, 4 * MiB}});
  b.walk(160, snap::OwnerRole::kOptimizerState, {{0x101300000, 8 * MiB}});
  b.mark(160, "auto:step");
  b.free(165, 0x101d00000);
  auto s = b.finish();
  label_categories(s);
  CHECK(cat(s, 0x100000000) == Category::kParameter);
  CHECK(cats(s, 0x100000000).size() == 1);
  CHECK(cat(s, 0x100400000) == Category::kInput);
  CHECK(cats(s, 0x100400000).size() == 3);  // alloc, free_requested, free_completed
  CHECK(cat(s, 0x100500000) == Category::kTemporary);
  CHECK(cat(s, 0x100600000) == Category::kInput);
  CHECK(cat(s, 0x101d00000) == Category::kUnknown);
  CHECK(cat(s, 0x100700000) == Category::kActivation);
  CHECK(cat(s, 0x100900000) == Category::kTemporary);
  CHECK(cat(s, 0x100a00000) == Category::kActivation);
  CHECK(cat(s, 0x100b00000) == Category::kActivation);
  CHECK(cat(s, 0x100c00000) == Category::kGradient);
  CHECK(cat(s, 0x101000000) == Category::kTemporary);
  CHECK(cat(s, 0x101100000) == Category::kAutograd);
  CHECK(cat(s, 0x101200000) == Category::kAutograd);
  CHECK(cat(s, 0x101300000) == Category::kOptimizerState);
  CHECK(cat(s, 0x101b00000) == Category::kTemporary);
  CHECK(cat(s, 0x101c00000) == Category::kUnknown);
  // PyTorch's segment event is unknown (the viewer needs one); the library's entries library.
  for (const auto& e : s.device_traces[0]) {
    if (e.source != snap::Source::kPytorch) CHECK(e.category == Category::kLibrary);
    if (e.action == snap::Action::kSegmentAlloc && e.source == snap::Source::kPytorch)
      CHECK(e.category == Category::kUnknown);
  }
}

TEST_CASE("categories: gradient accumulation labels each micro-step's activations",
          "[categories]") {
  TorchRunBuilder b;
  const auto ln = b.line("train.py", 20);
  b.segment(1, 0x100000000, 64 * MiB);
  b.phase(100, 150, "auto:forward");
  b.alloc(110, 0x100000000, 2 * MiB, ln);  // micro-step 0's activation
  b.phase(200, 250, "auto:backward");
  b.alloc(210, 0x100200000, 4 * MiB, ln, TorchRunBuilder::kAutogradTid);  // grad, kept
  b.free(220, 0x100000000, TorchRunBuilder::kAutogradTid);
  b.phase(300, 350, "auto:forward");
  b.alloc(310, 0x100600000, 2 * MiB, ln);  // micro-step 1's activation
  b.alloc(320, 0x100800000, 1 * MiB, ln);  // freed before micro-step 1's backward ends: still
  b.phase(400, 450, "auto:backward");      // alive when it starts
  b.free(410, 0x100600000, TorchRunBuilder::kAutogradTid);
  b.free(420, 0x100800000, TorchRunBuilder::kAutogradTid);
  b.phase(500, 550, "auto:optimizer");
  b.walk(550, snap::OwnerRole::kGradient, {{0x100200000, 4 * MiB}});
  b.mark(550, "auto:step");
  auto s = b.finish();
  label_categories(s);
  CHECK(cat(s, 0x100000000) == Category::kActivation);
  CHECK(cat(s, 0x100600000) == Category::kActivation);
  CHECK(cat(s, 0x100800000) == Category::kActivation);
  CHECK(cat(s, 0x100200000) == Category::kGradient);
}

TEST_CASE("categories: a gradient made again where the last walk saw one is a gradient",
          "[categories]") {
  // zero_grad(set_to_none=True): step 2's gradient is a new tensor at step 1's address, and no
  // walk follows it (the pointers did not move). A backward tensor at that address that does not
  // live into the optimizer step, and one of another size, stay autograd/temporary.
  TorchRunBuilder b;
  const auto ln = b.line("train.py", 20);
  b.segment(1, 0x100000000, 64 * MiB);
  b.phase(100, 150, "auto:forward");
  b.phase(200, 250, "auto:backward");
  b.alloc(210, 0x100200000, 4 * MiB, ln, TorchRunBuilder::kAutogradTid);  // step 1's gradient
  b.phase(300, 350, "auto:optimizer");
  b.walk(350, snap::OwnerRole::kGradient, {{0x100200000, 4 * MiB}});
  b.mark(350, "auto:step");
  b.free(400, 0x100200000);  // zero_grad(set_to_none=True)
  b.phase(500, 550, "auto:forward");
  b.phase(600, 650, "auto:backward");
  b.alloc(605, 0x100200000, 2 * MiB, ln, TorchRunBuilder::kAutogradTid);  // another size
  b.free(606, 0x100200000, TorchRunBuilder::kAutogradTid);
  b.alloc(610, 0x100200000, 4 * MiB, ln, TorchRunBuilder::kAutogradTid);  // step 2's gradient
  b.alloc(620, 0x100800000, 1 * MiB, ln, TorchRunBuilder::kAutogradTid);  // kept, not walked
  b.phase(700, 750, "auto:optimizer");
  b.mark(750, "auto:step");
  auto s = b.finish();
  label_categories(s);
  const auto all = cats(s, 0x100200000);
  REQUIRE(all.size() == 7);  // step 1's alloc and 2 frees, the 2 MiB one's 3, step 2's alloc
  CHECK(all[0] == Category::kGradient);
  CHECK(all[3] == Category::kTemporary);
  CHECK(all[6] == Category::kGradient);
  CHECK(cat(s, 0x100800000) == Category::kAutograd);
}

TEST_CASE("categories: checkpoint recompute is backward's, never forward's", "[categories]") {
  TorchRunBuilder b;
  const auto ln = b.line("train.py", 30);
  b.segment(1, 0x100000000, 64 * MiB);
  b.phase(100, 150, "auto:forward");
  b.alloc(110, 0x100000000, 1 * MiB, ln);  // the checkpoint's input: activation
  b.start(200, "auto:backward");
  b.start(210, "auto:forward");            // recompute (the hooks may mark it; it is backward)
  b.alloc(220, 0x100100000, 2 * MiB, ln);  // recomputed, used and freed: temporary
  b.alloc(230, 0x100300000, 2 * MiB, ln);  // recomputed, kept past backward: autograd
  b.end(240, "auto:forward");
  b.free(250, 0x100100000, TorchRunBuilder::kAutogradTid);
  b.free(260, 0x100000000, TorchRunBuilder::kAutogradTid);
  b.end(300, "auto:backward");
  b.mark(310, "auto:step");
  auto s = b.finish();
  label_categories(s);
  CHECK(cat(s, 0x100000000) == Category::kActivation);
  CHECK(cat(s, 0x100100000) == Category::kTemporary);
  CHECK(cat(s, 0x100300000) == Category::kAutograd);
}

TEST_CASE("categories: optimizer.step(closure)'s own tensors freed within the step are temporary",
          "[categories]") {
  // LBFGS: the step's own tensors (direction, line search) live across the closure's forward and
  // backward, which cut the step into several optimizer spans; freed before the step returns.
  TorchRunBuilder b;
  const auto ln = b.line("train.py", 40);
  b.segment(1, 0x100000000, 64 * MiB);
  b.start(100, "auto:optimizer");
  b.phase(130, 140, "auto:forward");
  b.phase(160, 170, "auto:backward");
  b.alloc(180, 0x100000000, 1 * MiB, ln);  // made between evaluations, freed after the next
  b.alloc(185, 0x100100000, 1 * MiB, ln);  // made there and kept past the step
  b.alloc(186, 0x100200000, 1 * MiB, ln);  // made and freed in one optimizer span
  b.free(187, 0x100200000);
  b.phase(230, 240, "auto:forward");
  b.phase(260, 270, "auto:backward");
  b.free(290, 0x100000000);
  b.end(400, "auto:optimizer");
  b.mark(400, "auto:step");
  b.phase(500, 510, "auto:forward");
  b.free(505, 0x100100000);
  auto s = b.finish();
  label_categories(s);
  CHECK(cat(s, 0x100000000) == Category::kTemporary);
  CHECK(cat(s, 0x100100000) == Category::kUnknown);
  CHECK(cat(s, 0x100200000) == Category::kTemporary);
}

TEST_CASE("categories: inference, activations alive at the forward's end", "[categories]") {
  TorchRunBuilder b;
  const auto ln = b.line("infer.py", 5);
  b.segment(1, 0x100000000, 64 * MiB);
  b.alloc(10, 0x100000000, 1 * MiB, ln);  // the batch: input
  b.phase(100, 150, "auto:forward");
  b.alloc(110, 0x100100000, 2 * MiB, ln);  // freed inside: temporary
  b.free(120, 0x100100000);
  b.alloc(130, 0x100300000, 3 * MiB, ln);  // the output, kept: activation
  b.phase(200, 250, "auto:forward");
  b.alloc(210, 0x100600000, 3 * MiB, ln);  // freed at the END's microsecond: temporary
  b.free(250, 0x100600000);
  auto s = b.finish();
  label_categories(s);
  CHECK(cat(s, 0x100000000) == Category::kInput);
  CHECK(cat(s, 0x100100000) == Category::kTemporary);
  CHECK(cat(s, 0x100300000) == Category::kActivation);
  CHECK(cat(s, 0x100600000) == Category::kTemporary);
}

TEST_CASE("categories: walks see the tensors alive at their moment only", "[categories]") {
  TorchRunBuilder b;
  const auto ln = b.line("train.py", 40);
  b.segment(1, 0x100000000, 64 * MiB);
  b.alloc(10, 0x100000000, 4 * MiB, ln);  // A: freed at the walk's microsecond, still owned
  b.alloc(20, 0x100800000, 1 * MiB, ln);  // D: alive at the walk
  b.free(50, 0x100000000);
  b.alloc(55, 0x100000000, 4 * MiB, ln);  // B: A's address again, after the walk
  b.alloc(60, 0x100500000, 2 * MiB, ln);  // C: allocated after the only walk of its pointer
  b.walk(50, snap::OwnerRole::kParameter,
         {{0x100000000, 4 * MiB}, {0x100500000, 2 * MiB}, {0x100800000, 1 * MiB}});
  b.walk(70, snap::OwnerRole::kGradient, {{0x100400000, 4}});  // past B's end, before C: none
  auto s = b.finish();
  label_categories(s);  // ownership walks only, no phases: the rest is unknown
  const auto& tr = s.device_traces[0];
  REQUIRE(tr.size() == 7);
  CHECK(tr[0].category == Category::kUnknown);    // the segment
  CHECK(tr[1].category == Category::kParameter);  // A's alloc
  CHECK(tr[2].category == Category::kParameter);  // D
  CHECK(tr[3].category == Category::kParameter);  // A's free_requested
  CHECK(tr[4].category == Category::kParameter);  // A's free_completed
  CHECK(tr[5].category == Category::kUnknown);    // B
  CHECK(tr[6].category == Category::kUnknown);    // C
}

TEST_CASE("categories: a snapshot without phases or walks is left unlabelled", "[categories]") {
  TorchRunBuilder b;
  const auto ln = b.line("train.py", 1);
  b.segment(1, 0x100000000, 64 * MiB);
  b.alloc(10, 0x100000000, 4 * MiB, ln);
  b.library(20, 0x200000000, 1 * MiB, b.native("libnccl.so.2", "ncclCommInit"));
  b.mark(30, "user");
  auto s = b.finish();
  label_categories(s);
  for (const auto& e : s.device_traces[0]) CHECK(e.category == Category::kNone);
}

TEST_CASE("phases: a closure's forward, backward and zero_grad nest in the optimizer step",
          "[phases]") {
  // LBFGS / Lightning: optimizer.step(closure) runs zero_grad, forward, the loss and backward
  // (twice here, two evaluations), then updates.
  TorchRunBuilder b;
  b.start(100, "auto:optimizer");
  for (int k = 0; k < 2; ++k) {
    const int64_t t = 100 + 100 * k;
    b.phase(t + 10, t + 20, "auto:zero_grad");
    b.phase(t + 30, t + 40, "auto:forward");
    b.phase(t + 60, t + 70, "auto:backward");
  }
  b.end(400, "auto:optimizer");
  b.mark(400, "auto:step");
  const Phases p(b.finish());
  CHECK(p.training());
  REQUIRE(p.steps().size() == 2);
  CHECK(p.steps()[0].micro_steps == 2);
  struct Want {
    Phase phase;
    int64_t begin, end;
    int micro;
  };
  const std::vector<Want> want = {
      {Phase::kSetup, kMin, 100, -1},   {Phase::kOptimizer, 100, 110, -1},
      {Phase::kZeroGrad, 110, 121, -1}, {Phase::kOptimizer, 121, 130, -1},
      {Phase::kForward, 130, 141, 0},   {Phase::kLoss, 141, 160, 0},
      {Phase::kBackward, 160, 171, 0},  {Phase::kOptimizer, 171, 210, -1},
      {Phase::kZeroGrad, 210, 221, -1}, {Phase::kOptimizer, 221, 230, -1},
      {Phase::kForward, 230, 241, 1},   {Phase::kLoss, 241, 260, 1},
      {Phase::kBackward, 260, 271, 1},  {Phase::kOptimizer, 271, 401, -1},
  };
  const auto& sp = p.spans();
  REQUIRE(sp.size() == want.size() + 1);  // and the data stretch after the step
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("span " << i);
    CHECK(sp[i].phase == want[i].phase);
    CHECK(sp[i].begin_us == want[i].begin);
    CHECK(sp[i].end_us == want[i].end);
    CHECK(sp[i].micro == want[i].micro);
    CHECK(sp[i].step == 0);
  }
  CHECK(sp.back().phase == Phase::kData);
  CHECK(sp.back().step == 1);
}

TEST_CASE("phases: a loss module's call and the stretches around it are one loss span",
          "[phases]") {
  TorchRunBuilder b;
  b.phase(100, 200, "auto:forward");
  b.phase(210, 220, "auto:loss");
  b.phase(230, 300, "auto:backward");
  b.phase(310, 320, "auto:optimizer");
  b.mark(320, "auto:step");
  b.phase(330, 340, "auto:zero_grad");
  const Phases p(b.finish());
  std::vector<std::pair<Phase, int64_t>> got;
  for (const auto& sp : p.spans()) got.push_back({sp.phase, sp.begin_us});
  const std::vector<std::pair<Phase, int64_t>> want = {
      {Phase::kSetup, kMin},   {Phase::kForward, 100},   {Phase::kLoss, 201},
      {Phase::kBackward, 230}, {Phase::kOptimizer, 301}, {Phase::kData, 321},
      {Phase::kZeroGrad, 330}, {Phase::kData, 341}};
  CHECK(got == want);
}

TEST_CASE("categories: what the program makes between backward and the step and keeps is its own",
          "[categories]") {
  // transformers' Trainer: clip_grad_norm_'s total norm, made after backward and before
  // optimizer.step(), kept for the logs; the step's own tensor kept past it stays unknown.
  TorchRunBuilder b;
  const auto ln = b.line("train.py", 60);
  b.segment(1, 0x100000000, 64 * MiB);
  b.phase(100, 150, "auto:forward");
  b.walk(100, snap::OwnerRole::kInput, {{0x100f00000, 1 * MiB}});
  b.phase(200, 250, "auto:backward");
  b.alloc(260, 0x100000000, 4, ln);  // the total norm, kept past the step: program
  b.alloc(270, 0x100100000, 4, ln);  // made there and freed within the step: temporary
  b.free(320, 0x100100000);
  b.phase(300, 350, "auto:optimizer");
  b.alloc(310, 0x100200000, 1 * MiB, ln);  // the step's own, kept, no walk: unknown
  b.mark(350, "auto:step");
  b.phase(400, 450, "auto:forward");
  b.free(410, 0x100000000);
  auto s = b.finish();
  label_categories(s);
  CHECK(cat(s, 0x100000000) == Category::kProgram);
  CHECK(cat(s, 0x100100000) == Category::kTemporary);
  CHECK(cat(s, 0x100200000) == Category::kUnknown);
}

TEST_CASE("categories: input walks tell the batch from the program's own tensors", "[categories]") {
  TorchRunBuilder b;
  const auto ln = b.line("train.py", 50);
  b.segment(1, 0x100000000, 64 * MiB);
  b.alloc(10, 0x100000000, 1 * MiB, ln);  // a fixed batch made in setup, used every step: input
  b.alloc(20, 0x100100000, 8 * MiB, ln);  // a tensor kept at module level: the program's own
  b.alloc(30, 0x100900000, 1 * MiB, ln);  // made and freed in setup: temporary
  b.free(40, 0x100900000);
  b.phase(100, 150, "auto:forward");
  b.walk(100, snap::OwnerRole::kInput, {{0x100000000, 1 * MiB}});
  b.alloc(110, 0x100a00000, 1 * MiB, ln);  // the model's output, fed to the loss module
  b.phase(160, 170, "auto:loss");
  b.alloc(165, 0x100b00000, 4, ln);  // the loss scalar: activation, every step alike
  b.phase(200, 250, "auto:backward");
  b.free(240, 0x100a00000, TorchRunBuilder::kAutogradTid);
  b.phase(300, 350, "auto:optimizer");
  b.mark(350, "auto:step");
  b.free(360, 0x100b00000);
  b.alloc(370, 0x100c00000, 1 * MiB, ln);  // step 2's batch, a new tensor: input
  b.alloc(380, 0x100d00000, 2 * MiB, ln);  // step 2's own bookkeeping, kept: program's own
  b.phase(400, 450, "auto:forward");
  b.walk(400, snap::OwnerRole::kInput, {{0x100c00000, 1 * MiB}});
  b.phase(460, 470, "auto:loss");
  b.alloc(465, 0x100b00000, 4, ln);
  b.phase(500, 550, "auto:backward");
  auto s = b.finish();
  label_categories(s);
  CHECK(cat(s, 0x100000000) == Category::kInput);
  CHECK(cat(s, 0x100100000) == Category::kProgram);
  CHECK(cat(s, 0x100900000) == Category::kTemporary);
  CHECK(cat(s, 0x100a00000) == Category::kActivation);
  const auto loss = cats(s, 0x100b00000);
  REQUIRE(loss.size() == 4);  // step 1's alloc and frees, step 2's alloc
  for (auto c : loss) CHECK(c == Category::kActivation);
  CHECK(cat(s, 0x100c00000) == Category::kInput);
  CHECK(cat(s, 0x100d00000) == Category::kProgram);
}

TEST_CASE("categories: each step's batch at the last one's pointer is input without a new walk",
          "[categories]") {
  // The input walk is re-sent only when the root's inputs' pointers change (cumemtrace_phases.py
  // _send): a loop making a new batch every step gets it back from the cache where the last one
  // was, so from step 2 on no walk comes (ResNet-18 on an H100: its 36.75 MiB batch read
  // "program", 0 B of input at the allocated peak).
  TorchRunBuilder b;
  const auto ln = b.line("train.py", 50);
  const auto ag = TorchRunBuilder::kAutogradTid;
  b.segment(1, 0x100000000, 64 * MiB);
  b.alloc(10, 0x100000000, 2 * MiB, ln);  // step 1's batch
  b.phase(100, 150, "auto:forward");
  b.walk(100, snap::OwnerRole::kInput, {{0x100000000, 2 * MiB}});
  b.phase(200, 250, "auto:backward");
  b.phase(300, 350, "auto:optimizer");
  b.mark(350, "auto:step");
  b.free(360, 0x100000000);                // step 1's batch dies with the step's locals
  b.alloc(370, 0x100000000, 2 * MiB, ln);  // step 2's, where it was: no walk at its forward
  b.alloc(380, 0x100400000, 1 * MiB, ln);  // the program's own, kept
  b.phase(400, 450, "auto:forward");
  b.phase(500, 550, "auto:backward");
  b.phase(600, 650, "auto:optimizer");
  b.mark(650, "auto:step");
  b.free(660, 0x100000000);
  b.alloc(670, 0x100000000, 2 * MiB, ln);  // made at the old pointer, freed before the forward
  b.free(680, 0x100000000);
  b.alloc(690, 0x100000000, 2 * MiB, ln);  // at the old pointer, kept, but not passed: step 3's
  b.alloc(695, 0x100600000, 2 * MiB, ln);  // batch is elsewhere, and its forward sends a walk
  b.phase(700, 750, "auto:forward");
  b.walk(700, snap::OwnerRole::kInput, {{0x100600000, 2 * MiB}});
  b.phase(800, 850, "auto:backward");
  b.free(840, 0x100000000, ag);
  b.free(845, 0x100600000, ag);
  auto s = b.finish();
  label_categories(s);
  const auto at = cats(s, 0x100000000);  // four lives of three entries each
  REQUIRE(at.size() == 12);
  CHECK(at[0] == Category::kInput);
  CHECK(at[3] == Category::kInput);      // step 2's batch: the carried walk names it
  CHECK(at[6] == Category::kTemporary);  // not alive when the next forward starts
  CHECK(at[9] == Category::kProgram);    // step 3's forward sent a walk that does not name it
  CHECK(cat(s, 0x100400000) == Category::kProgram);
  CHECK(cat(s, 0x100600000) == Category::kInput);
}

TEST_CASE("categories: DDP's gradient buckets are communication buffers", "[categories]") {
  // DDP's Reducer makes its buckets in C++ straight from DistributedDataParallel._ddp_init_helper
  // (construction, in setup) and rebuilds them from ._pre_forward (the first forward): kept, they
  // are "communication"; what those frames make and free within the stretch stays temporary; the
  // same bytes from the user's line are not; with gradient_as_bucket_view a gradient walk names
  // the bucket first (rule 1).
  TorchRunBuilder b;
  const auto ddp = "/venv/lib/python3.11/site-packages/torch/nn/parallel/distributed.py";
  const auto init = b.stack({{ddp, 1255, "DistributedDataParallel._ddp_init_helper"},
                             {ddp, 900, "DistributedDataParallel.__init__"},
                             {"train.py", 20, "<module>"}});
  const auto rebuild = b.stack({{ddp, 1584, "DistributedDataParallel._pre_forward"},
                                {ddp, 1650, "DistributedDataParallel._run_ddp_forward"},
                                {"train.py", 30, "<module>"}});
  const auto old_python = b.stack({{ddp, 1584, "_pre_forward"}, {"train.py", 30, "<module>"}});
  const auto user = b.line("train.py", 40);
  b.segment(1, 0x100000000, 64 * MiB);
  b.alloc(10, 0x100000000, 2 * MiB, init);  // a bucket at construction, freed at the rebuild
  b.alloc(11, 0x100200000, 512, init);      // the Reducer's map of used parameters, kept
  b.alloc(12, 0x100300000, 2 * MiB, user);  // the user's own tensor: the program's
  b.phase(100, 150, "auto:forward");
  b.walk(100, snap::OwnerRole::kInput, {});
  b.alloc(105, 0x100500000, 2 * MiB, rebuild);  // the rebuilt bucket, kept
  b.free(106, 0x100000000);
  b.alloc(107, 0x100700000, 1 * MiB, rebuild);  // made and freed in the forward: temporary
  b.free(108, 0x100700000);
  b.alloc(109, 0x100800000, 1 * MiB, old_python);  // CPython 3.10: no class in the name
  b.alloc(110, 0x100900000, 4 * MiB, init);        // a bucket whose views are the gradients
  b.phase(200, 250, "auto:backward");
  b.phase(300, 350, "auto:optimizer");
  b.walk(350, snap::OwnerRole::kGradient, {{0x100900000, 4 * MiB}});
  b.mark(350, "auto:step");
  auto s = b.finish();
  label_categories(s);
  CHECK(cat(s, 0x100000000) == Category::kCommunication);
  CHECK(cat(s, 0x100200000) == Category::kCommunication);
  CHECK(cat(s, 0x100300000) == Category::kProgram);
  CHECK(cat(s, 0x100500000) == Category::kCommunication);
  CHECK(cat(s, 0x100700000) == Category::kTemporary);
  CHECK(cat(s, 0x100800000) == Category::kCommunication);
  CHECK(cat(s, 0x100900000) == Category::kGradient);
}

TEST_CASE("categories: a bucket the gradients were views of until the rebuild is communication",
          "[categories]") {
  // gradient_as_bucket_view on NCCL: step 1's gradients are views of the construction's bucket;
  // the rebuilt bucket holds them from step 2 on, while NCCL may keep the first one alive.
  TorchRunBuilder b;
  const auto ddp = "/venv/lib/python3.11/site-packages/torch/nn/parallel/distributed.py";
  const auto init = b.stack(
      {{ddp, 1255, "DistributedDataParallel._ddp_init_helper"}, {"train.py", 20, "<module>"}});
  const auto rebuild =
      b.stack({{ddp, 1584, "DistributedDataParallel._pre_forward"}, {"train.py", 30, "<module>"}});
  b.segment(1, 0x100000000, 64 * MiB);
  b.alloc(10, 0x100000000, 4 * MiB, init);
  b.phase(100, 150, "auto:forward");
  b.phase(200, 250, "auto:backward");
  b.phase(300, 350, "auto:optimizer");
  b.walk(350, snap::OwnerRole::kGradient, {{0x100000000, 4 * MiB}});
  b.mark(350, "auto:step");
  b.phase(400, 450, "auto:forward");
  b.alloc(405, 0x100400000, 4 * MiB, rebuild);
  b.phase(500, 550, "auto:backward");
  b.phase(600, 650, "auto:optimizer");
  b.walk(650, snap::OwnerRole::kGradient, {{0x100400000, 4 * MiB}});
  b.mark(650, "auto:step");
  auto s = b.finish();
  label_categories(s);
  CHECK(cat(s, 0x100000000) == Category::kCommunication);
  CHECK(cat(s, 0x100400000) == Category::kGradient);
}
