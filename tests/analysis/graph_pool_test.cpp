// Gradients held outside PyTorch's blocks (categories.h held_outside_blocks), in runs built by hand
// the way torch.compile(mode="reduce-overhead") leaves them on an H100 (torch 2.11): step 1 eager,
// step 2 records the graphs into a CUDA graph pool (the gradients are blocks allocated there),
// step 3 replays them: zero_grad frees the recorded outputs' blocks and the replay rebuilds the
// gradients over the same pool memory with no allocator call, at the pointers the last gradient
// walk saw (so no new walk comes). The ledger and the view by module must count them, exactly,
// and say why; where they cannot be placed, say so.
#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/snapshot_input.h"
#include "pytorch/categories.h"
#include "pytorch/ledger.h"
#include "pytorch/modules.h"
#include "pytorch/whatif.h"
#include "support/torch_run_builder.h"

using namespace cumemtrace;
using namespace cumemtrace::analysis;
using testing::TorchRunBuilder;

namespace {

constexpr uint64_t MiB = 1 << 20;
constexpr uint64_t kWeight = 0x100000000, kEagerGrad = 0x100400000;
constexpr uint64_t kPool = 0x200000000;  // the graph pool's segment; its first block the gradient

// The run above. `graph_pool`: the private pool use is recorded (cumemtrace_torch.py); `grad_at`:
// where the recorded gradient is (kPool, or outside every segment).
snap::Snapshot compiled_run(bool graph_pool = true, uint64_t grad_at = kPool) {
  TorchRunBuilder b;
  const auto ln = b.line("train.py", 20);
  const auto ag = TorchRunBuilder::kAutogradTid;
  b.segment(1, kWeight, 64 * MiB);
  b.alloc(5, kWeight, 4 * MiB, b.stack({{"train.py", 5, "<module>", "fc"}}));
  b.walk(6, snap::OwnerRole::kParameter, {{kWeight, 4 * MiB}});
  b.names(6, snap::OwnerRole::kParameter, {{kWeight, "fc.weight"}});
  // step 1: eager (Inductor's warm-up)
  b.phase(100, 150, "auto:forward");
  b.phase(200, 250, "auto:backward");
  b.alloc(210, kEagerGrad, 4 * MiB, ln, ag);
  b.phase(300, 350, "auto:optimizer");
  b.mark(350, "auto:step");
  b.walk(360, snap::OwnerRole::kGradient, {{kEagerGrad, 4 * MiB}});
  b.names(361, snap::OwnerRole::kGradient, {{kEagerGrad, "fc.weight"}});
  // step 2: the graphs recorded into their pool; the recorded output is the gradient
  b.phase(400, 420, "auto:zero_grad");
  b.free(410, kEagerGrad);
  if (graph_pool) b.pool_use(500, "cuda_graph");
  b.segment(501, kPool, 20 * MiB);
  b.phase(510, 550, "auto:forward");
  b.phase(600, 650, "auto:backward");
  b.alloc(610, grad_at, 4 * MiB, ln, ag);
  b.phase(700, 750, "auto:optimizer");
  b.mark(750, "auto:step");
  b.walk(760, snap::OwnerRole::kGradient, {{grad_at, 4 * MiB}});
  b.names(761, snap::OwnerRole::kGradient, {{grad_at, "fc.weight"}});
  // step 3: replays; zero_grad drops the recorded output, the replay rebuilds it in place
  b.phase(800, 820, "auto:zero_grad");
  b.free(810, grad_at);
  b.phase(900, 950, "auto:forward");
  b.phase(1000, 1050, "auto:backward");
  b.phase(1100, 1150, "auto:optimizer");
  b.mark(1150, "auto:step");  // the pointers did not move: no walk
  auto s = b.finish();
  label_categories(s);
  return s;
}

nlohmann::json held_json_of(const snap::Snapshot& s, std::string* text = nullptr) {
  const SiteTable sites(s);
  const auto l = build_ledger(s, sites);
  REQUIRE(l);
  REQUIRE(l->devices.size() == 1);
  if (text) {
    std::ostringstream out;
    print_ledger_text(*l, 0, 10, out);
    *text = out.str();
  }
  return ledger_json(*l, 10)["devices"][0]["held_outside_blocks"];
}

}  // namespace

TEST_CASE("graph pool: a replayed step's gradients are held in the pool, exact bytes") {
  const auto s = compiled_run();
  const Phases ph(s);
  const auto dt = device_tensors(s, 0, ph);
  // step 2 (recording): the gradient is a live block, labelled as before; nothing held outside
  const auto rec = held_outside_blocks(s, 0, ph, dt, 1);
  CHECK(rec.step == 1);
  CHECK(rec.tensors.empty());
  // step 3 (replay): the walk of step 2 still names it; no block holds it; the pool's segment does
  const auto rep = held_outside_blocks(s, 0, ph, dt, 2);
  CHECK(rep.step == 2);
  CHECK(rep.graph_pool);
  CHECK(rep.walk_us == 760);
  REQUIRE(rep.tensors.size() == 1);
  CHECK(rep.tensors[0].addr == kPool);
  CHECK(rep.tensors[0].in_segment);
  CHECK(rep.bytes(true) == 4 * MiB);
  CHECK(rep.bytes(false) == 0);

  std::string text;
  const auto j = held_json_of(s, &text);
  CHECK(j["step"] == 3);
  CHECK(j["graph_pool"] == true);
  CHECK(j["gradient_bytes"] == 4 * MiB);
  CHECK(j["outside_segments_bytes"] == 0);
  CHECK(j["tensors"] == 1);
  CHECK_THAT(text, Catch::Contains(
                       "  device 0, held outside PyTorch's allocated blocks at the end of step 3: "
                       "gradient 4.00 MiB (1 tensor), in a CUDA graph pool: the graphs' replays "
                       "rebuild their outputs over the pool's memory with no allocator call"));

  // The view by module: fc's gradient at the end of step 3, named by step 2's walk.
  const auto v = build_module_view(s, 1);
  REQUIRE(v);
  CHECK(v->reference == "end of step 3");
  bool found = false;
  for (const auto& r : v->rows) {
    if (r.module != "fc") continue;
    found = true;
    CHECK(r.parameters == 4 * MiB);
    CHECK(r.gradients == 4 * MiB);
  }
  CHECK(found);
}

TEST_CASE("graph pool: gradients that no block or pool explains are listed with why") {
  // No CUDA graph pool was used: inside a segment, the trace cannot say what holds them.
  std::string text;
  auto j = held_json_of(compiled_run(false), &text);
  CHECK(j["graph_pool"] == false);
  CHECK(j["gradient_bytes"] == 4 * MiB);
  CHECK_THAT(text, Catch::Contains("gradient 4.00 MiB (1 tensor), in memory PyTorch's allocator "
                                   "holds as free, with no CUDA graph pool used"));
  // At a pointer in no segment of the device: listed apart, never counted as the pool's.
  j = held_json_of(compiled_run(true, 0x300000000), &text);
  CHECK(j["gradient_bytes"] == 0);
  CHECK(j["outside_segments_bytes"] == 4 * MiB);
  CHECK_THAT(text, Catch::Contains("gradient 4.00 MiB (1 tensor), at data pointers in no PyTorch "
                                   "segment of this device"));
}

TEST_CASE("graph pool: a gradient in a block from before the trace is that block's") {
  // A capture that attached late: the gradient's segment and block were made before the trace
  // began and are in the end state only. Held by a block: nothing to list.
  auto s = compiled_run(true, 0x300000000);
  snap::Segment g;
  g.address = 0x300000000;
  g.total_size = g.allocated_size = g.active_size = g.requested_size = 8 * MiB;
  g.source = snap::Source::kPytorch;
  g.blocks.push_back({0x300000000, 8 * MiB, 4 * MiB, "active_allocated"});
  for (auto& e : s.device_traces[0])  // its trace entries gone: it was there all along
    if (e.addr == 0x300000000) e.addr = 0x380000000;
  s.segments.push_back(g);
  const auto j = held_json_of(s);
  CHECK(j["tensors"] == 0);
  CHECK(j["outside_segments_bytes"] == 0);
}

TEST_CASE("graph pool: an eager loop's gradients are blocks, nothing is held outside") {
  // The same loop with step 3 eager: its backward makes the gradient again where the walk saw it.
  TorchRunBuilder b;
  const auto ln = b.line("train.py", 20);
  const auto ag = TorchRunBuilder::kAutogradTid;
  b.segment(1, kWeight, 64 * MiB);
  b.alloc(5, kWeight, 4 * MiB, ln);
  b.walk(6, snap::OwnerRole::kParameter, {{kWeight, 4 * MiB}});
  for (int k = 0; k < 3; ++k) {
    const int64_t t = 1000 * (k + 1);
    b.phase(t, t + 10, "auto:zero_grad");
    if (k) b.free(t + 5, kEagerGrad);
    b.phase(t + 100, t + 150, "auto:forward");
    b.phase(t + 200, t + 250, "auto:backward");
    b.alloc(t + 210, kEagerGrad, 4 * MiB, ln, ag);
    b.phase(t + 300, t + 350, "auto:optimizer");
    b.mark(t + 350, "auto:step");
    if (!k) b.walk(t + 360, snap::OwnerRole::kGradient, {{kEagerGrad, 4 * MiB}});
  }
  auto s = b.finish();
  label_categories(s);
  std::string text;
  const auto j = held_json_of(s, &text);
  CHECK(j["step"] == 3);
  CHECK(j["tensors"] == 0);
  CHECK(j["gradient_bytes"] == 0);
  CHECK(text.find("held outside") == std::string::npos);
}

TEST_CASE("graph pool fixture: the replays' gradients equal torch's, by module too", "[fixture]") {
  // tests/fixtures/h100-compiled-reduce-overhead (README): before, the ledger and the view by
  // module had no gradient at the end of step 6 (0 B against torch's 33,640,960).
  const std::string dir = CUMEMTRACE_FIXTURES "/h100-compiled-reduce-overhead";
  std::ifstream in(dir + "/truth.json");
  REQUIRE(in);
  const auto truth = nlohmann::json::parse(in);
  snap::Snapshot s = snap::read_snapshot_any(dir + "/snapshot.json");
  label_block_sizes(s);
  const auto j = held_json_of(s);
  CHECK(j["step"] == 6);
  CHECK(j["graph_pool"] == true);
  CHECK(j["tensors"] == 6);
  CHECK(j["gradient_bytes"] == truth["gradient"].get<uint64_t>());
  CHECK(j["outside_segments_bytes"] == 0);
  const auto v = build_module_view(s, 1);
  REQUIRE(v);
  std::map<std::string, uint64_t> grads;
  for (const auto& r : v->rows) grads[r.module] = r.gradients;
  // each Linear's weight and bias (fp32, 512 B blocks): 0 4096x1024 + 4096, 2 1024x4096 + 1024
  CHECK(grads["0"] == 16 * MiB + 16384);
  CHECK(grads["2"] == 16 * MiB + 4096);
  CHECK(grads["4"] == 65536 + 512);
}
