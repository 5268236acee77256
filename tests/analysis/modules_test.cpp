// The by-module view (modules.h) of a PyTorch run built by hand, with exact bytes: a model Net
// with a root parameter `scale`, a child `enc` and a ModuleList `dec` of two children, trained
// two steps (zero_grad(set_to_none) at each step's start); its module calls' frames carry module
// names (Frame::module, the innermost first) and its walks carry tensor names. Rows at depth 1
// and 2: parameters, gradients and optimizer state by their parameter's module, the activations
// each module saved, and PyTorch's allocated bytes at the worst allocation of each in forward and
// backward (worked out by hand below).
#include <catch2/catch.hpp>

#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "pytorch/categories.h"
#include "pytorch/ledger.h"
#include "pytorch/modules.h"
#include "support/torch_run_builder.h"
#include "verdicts/check.h"
#include "verdicts/diff.h"
#include "verdicts/report.h"

using namespace cumemtrace;
using namespace cumemtrace::analysis;
using testing::TorchRunBuilder;

namespace {

constexpr uint64_t MiB = 1 << 20;

// A frame of Module._wrapped_call_impl calling `module`.
snap::Frame call(const std::string& module) {
  return {"/venv/torch/nn/modules/module.py", 1775, "Module._wrapped_call_impl", module};
}

// The stack of an op at model.py:`line` inside `modules` (outermost first).
snap::Stack in_modules(int64_t line, const std::vector<std::string>& modules) {
  snap::Stack st = {{"model.py", line, "forward"}};
  for (auto m = modules.rbegin(); m != modules.rend(); ++m) {
    st.push_back(call(*m));
    st.push_back({"model.py", line - 10, "forward"});
  }
  st.push_back({"train.py", 40, "<module>"});
  return st;
}

// Parameters (MiB): scale 1 (Net's own), enc.weight 4, dec.0.weight 2, dec.1.weight 1; Adam state
// twice each weight's (scale has none). Allocated (MiB) at the start of step 2: params 8 + state 14
// = 22. Forward: enc saves 3 (25) and makes a 1 MiB temporary (26, then 25); dec.0 saves 2 (27),
// dec.1 saves 1 (28). Backward (autograd's thread, no Python): dec.1's saved tensor freed (27),
// its gradient 1 (28); dec.0's freed (26), its gradient 2 (28); an autograd buffer 1 (29, then
// 28); enc's freed (25), its gradient 4 (29).
// With `workspaces`: torch's cuBLAS workspaces as a GPU run has them, made in step 1 and kept:
// 32 MiB in enc's first forward (the Python thread's first cuBLAS call), 32 MiB in backward
// (autograd's thread's first), walked (role kCublasWorkspace) at the first step's end.
// With `backward_modules`: the engine thread's stacks as the preload records them when it knows
// each node's module (preload/stacks/node_modules.h): the node's frame, the module call that made
// the node (dec.0's for the 1 MiB autograd buffer), then the backward() line lent by the caller.
// With `walk_once`: the gradients are walked and named at the first step's end only, as the
// phases do when the next step's gradients land where the last ones were (their pointers did
// not move: cumemtrace_phases.py's Phases._walk sends nothing new).
snap::Snapshot net_run(bool workspaces = false, bool backward_modules = false,
                       bool walk_once = false) {
  TorchRunBuilder b;
  const auto ag = TorchRunBuilder::kAutogradTid;
  const auto setup = b.line("train.py", 10, "<module>");
  const auto enc = b.stack(in_modules(20, {"Net", "enc"}));
  const auto dec0 = b.stack(in_modules(30, {"Net", "dec.0"}));
  const auto dec1 = b.stack(in_modules(30, {"Net", "dec.1"}));
  const auto engine = b.native("libtorch_cpu.so", "torch::autograd::generated::MmBackward0::apply");
  const snap::Frame node = {
      "libtorch_cpu.so", 0,
      "torch::autograd::generated::MmBackward0::apply(std::vector<at::Tensor, "
      "std::allocator<at::Tensor> >&&)"};
  const auto dec0_node = b.stack({node, call("dec.0"), {"train.py", 42, "<module>"}});
  const auto adam = b.line("adam.py", 178, "_init_group");
  const uint64_t scale = 0x100000000, w_enc = 0x100100000, w_dec0 = 0x100500000,
                 w_dec1 = 0x100700000;
  b.segment(1, 0x100000000, 256 * MiB);
  b.alloc(10, scale, 1 * MiB, setup);
  b.alloc(11, w_enc, 4 * MiB, setup);
  b.alloc(12, w_dec0, 2 * MiB, setup);
  b.alloc(13, w_dec1, 1 * MiB, setup);
  b.walk(20, snap::OwnerRole::kParameter,
         {{scale, 1 * MiB}, {w_enc, 4 * MiB}, {w_dec0, 2 * MiB}, {w_dec1, 1 * MiB}});
  b.names(20, snap::OwnerRole::kParameter,
          {{scale, "scale"},
           {w_enc, "enc.weight"},
           {w_dec0, "dec.0.weight"},
           {w_dec1, "dec.1.weight"}});
  const uint64_t g_enc = 0x101000000, g_dec0 = 0x101400000, g_dec1 = 0x101600000;
  const uint64_t s_enc = 0x102000000, s_dec0 = 0x102800000, s_dec1 = 0x102c00000;
  for (int k = 0; k < 2; ++k) {
    const int64_t t = 1000 * (k + 1);
    if (k > 0) {  // zero_grad(set_to_none=True)
      b.free(t, g_enc);
      b.free(t + 1, g_dec0);
      b.free(t + 2, g_dec1);
    }
    b.phase(t + 10, t + 100, "auto:forward");
    b.alloc(t + 20, 0x103000000, 3 * MiB, enc);
    b.alloc(t + 21, 0x103300000, 1 * MiB, enc);
    b.free(t + 22, 0x103300000);
    if (workspaces && k == 0) b.alloc(t + 25, 0x10a000000, 32 * MiB, enc);
    b.alloc(t + 30, 0x103400000, 2 * MiB, dec0);
    b.alloc(t + 40, 0x103600000, 1 * MiB, dec1);
    b.phase(t + 110, t + 200, "auto:backward");
    b.free(t + 120, 0x103600000, ag);
    b.alloc(t + 121, g_dec1, 1 * MiB, engine, ag);
    b.free(t + 130, 0x103400000, ag);
    b.alloc(t + 131, g_dec0, 2 * MiB, engine, ag);
    b.alloc(t + 140, 0x103700000, 1 * MiB, backward_modules ? dec0_node : engine, ag);
    b.free(t + 141, 0x103700000, ag);
    if (workspaces && k == 0) b.alloc(t + 145, 0x10c000000, 32 * MiB, engine, ag);
    b.free(t + 150, 0x103000000, ag);
    b.alloc(t + 151, g_enc, 4 * MiB, engine, ag);
    b.phase(t + 210, t + 300, "auto:optimizer");
    if (k == 0) {
      b.alloc(t + 220, s_enc, 8 * MiB, adam);
      b.alloc(t + 221, s_dec0, 4 * MiB, adam);
      b.alloc(t + 222, s_dec1, 2 * MiB, adam);
      b.walk(t + 300, snap::OwnerRole::kOptimizerState,
             {{s_enc, 8 * MiB}, {s_dec0, 4 * MiB}, {s_dec1, 2 * MiB}});
      b.names(t + 300, snap::OwnerRole::kOptimizerState,
              {{s_enc, "enc.weight"}, {s_dec0, "dec.0.weight"}, {s_dec1, "dec.1.weight"}});
      if (workspaces) {
        b.walk(t + 300, snap::OwnerRole::kCublasWorkspace, {{0x10a000000, 0}, {0x10c000000, 0}});
      }
    }
    if (!walk_once || k == 0) {
      b.walk(t + 300, snap::OwnerRole::kGradient,
             {{g_enc, 4 * MiB}, {g_dec0, 2 * MiB}, {g_dec1, 1 * MiB}});
      b.names(t + 300, snap::OwnerRole::kGradient,
              {{g_enc, "enc.weight"}, {g_dec0, "dec.0.weight"}, {g_dec1, "dec.1.weight"}});
    }
    b.mark(t + 300, "auto:step");
  }
  return b.finish();
}

const ModuleRow* find(const ModuleView& v, const std::string& name) {
  for (const auto& r : v.rows)
    if (r.module == name) return &r;
  return nullptr;
}

}  // namespace

TEST_CASE("module_at_depth keeps the first components") {
  REQUIRE(module_at_depth("transformer.h.0.mlp", 1) == "transformer");
  REQUIRE(module_at_depth("transformer.h.0.mlp", 2) == "transformer.h");
  REQUIRE(module_at_depth("transformer.h.0.mlp", 3) == "transformer.h.0");
  REQUIRE(module_at_depth("transformer.h.0.mlp", 9) == "transformer.h.0.mlp");
  REQUIRE(module_at_depth("GPT2LMHeadModel", 1) == "GPT2LMHeadModel");
  REQUIRE(module_at_depth("(backward)", 1) == "(backward)");
}

TEST_CASE("by module at depth 1: each module's subtree, exact bytes") {
  const auto s = net_run();
  REQUIRE(stack_module(s, 1) == "enc");  // the innermost module call's
  const auto v = build_module_view(s, 1);
  REQUIRE(v);
  REQUIRE(v->reference == "end of step 2");
  std::vector<std::string> order;
  for (const auto& r : v->rows) order.push_back(r.module);
  // By parameters + gradients + state + activations: enc 4+4+8+3, dec 3+3+6+3, Net 1; the
  // autograd buffers' row holds only its backward peak.
  REQUIRE(order == std::vector<std::string>{"enc", "dec", "Net", "(backward)"});
  const auto* enc = find(*v, "enc");
  CHECK(enc->parameters == 4 * MiB);
  CHECK(enc->gradients == 4 * MiB);
  CHECK(enc->optimizer_state == 8 * MiB);
  CHECK(enc->activations == 3 * MiB);
  CHECK(enc->forward_peak == 26 * MiB);
  CHECK(enc->backward_peak == 29 * MiB);
  const auto* dec = find(*v, "dec");
  CHECK(dec->parameters == 3 * MiB);
  CHECK(dec->gradients == 3 * MiB);
  CHECK(dec->optimizer_state == 6 * MiB);
  CHECK(dec->activations == 3 * MiB);
  CHECK(dec->forward_peak == 28 * MiB);
  CHECK(dec->backward_peak == 28 * MiB);
  const auto* net = find(*v, "Net");
  CHECK(net->parameters == 1 * MiB);
  CHECK(net->gradients == 0);
  CHECK(net->forward_peak == 0);
  const auto* bw = find(*v, "(backward)");
  CHECK(bw->total() == 0);
  CHECK(bw->backward_peak == 29 * MiB);
}

TEST_CASE("by module at depth 2: the ModuleList's children apart") {
  const auto v = build_module_view(net_run(), 2);
  REQUIRE(v);
  const auto* d0 = find(*v, "dec.0");
  const auto* d1 = find(*v, "dec.1");
  REQUIRE(d0);
  REQUIRE(d1);
  REQUIRE(find(*v, "dec") == nullptr);
  CHECK(d0->parameters == 2 * MiB);
  CHECK(d0->gradients == 2 * MiB);
  CHECK(d0->optimizer_state == 4 * MiB);
  CHECK(d0->activations == 2 * MiB);
  CHECK(d0->forward_peak == 27 * MiB);
  CHECK(d0->backward_peak == 28 * MiB);
  CHECK(d1->parameters == 1 * MiB);
  CHECK(d1->optimizer_state == 2 * MiB);
  CHECK(d1->activations == 1 * MiB);
  CHECK(d1->forward_peak == 28 * MiB);
  CHECK(d1->backward_peak == 28 * MiB);
}

TEST_CASE("the report carries the by-module view (text and json); none without names") {
  const auto s = net_run();
  const SiteTable sites(s);
  const auto r = build_report(s, sites, "net.json", {}, 2);
  REQUIRE(r.modules);
  std::ostringstream text;
  print_report_text(r, s, sites, ReportOptions{}, text);
  CHECK(text.str().find("By module (depth 2; parameters, gradients, optimizer state at the end "
                        "of step 2") != std::string::npos);
  CHECK(text.str().find("  dec.0 ") != std::string::npos);
  const auto j = report_json(r, s, sites, ReportOptions{});
  CHECK(j["modules"]["depth"] == 2);
  CHECK(j["modules"]["rows"][0]["module"] == "enc");
  CHECK(j["modules"]["rows"][0]["optimizer_state"] == 8 * MiB);

  auto plain = s;
  plain.tool->tensor_names.clear();
  for (auto& st : plain.stacks)
    for (auto& f : st) f.module.clear();
  std::string why;
  CHECK_FALSE(build_module_view(plain, 1, &why));
  CHECK(why.starts_with("no module names"));
  CHECK(report_json(build_report(plain, sites, "p.json"), plain, sites, ReportOptions{})["modules"]
            .is_null());
}

TEST_CASE("diff compares the by-module views row by row") {
  const auto base = net_run();
  auto now = net_run();
  // The new run's enc saves 2 MiB more: its saved tensor grows from 3 to 5 MiB in every step.
  auto& tr = now.device_traces[0];
  for (auto& e : tr)
    if (e.addr == 0x103000000) e.size = 5 * MiB;
  const auto d = diff_snapshots(base, "a.json", now, "b.json", 1);
  std::map<std::string, std::pair<int64_t, int64_t>> changed;
  for (const auto& v : d.modules)
    if (v.base != v.now) changed[v.name] = {v.base, v.now};
  // enc's activations and its forward peak; every later allocation's allocated bytes in the step
  // (dec's forward peak, every backward peak before enc's saved tensor is freed) shift too.
  CHECK(changed.at("enc: activations") == std::pair<int64_t, int64_t>{3 * MiB, 5 * MiB});
  CHECK(changed.at("enc: forward peak") == std::pair<int64_t, int64_t>{26 * MiB, 28 * MiB});
  CHECK(changed.at("dec: forward peak") == std::pair<int64_t, int64_t>{28 * MiB, 30 * MiB});
  CHECK(changed.at("dec: backward peak") == std::pair<int64_t, int64_t>{28 * MiB, 30 * MiB});
  CHECK(changed.at("(backward): backward peak") == std::pair<int64_t, int64_t>{29 * MiB, 31 * MiB});
  CHECK(changed.count("enc: parameters") == 0);
  CHECK(changed.count("enc: backward peak") == 0);  // enc's gradient comes after its freed
  CHECK(changed.size() == 5);
}

namespace {

const LedgerPhase& phase_of(const std::vector<LedgerPhase>& rows, Phase p) {
  for (const auto& r : rows)
    if (r.phase == p) return r;
  FAIL("no such phase");
  return rows.front();
}

std::vector<std::pair<std::string, int64_t>> by_module(const LedgerPhase& p) {
  std::vector<std::pair<std::string, int64_t>> v;
  for (const auto& m : p.added_by_module) v.emplace_back(m.module, m.bytes);
  return v;
}

using Rows = std::vector<std::pair<std::string, int64_t>>;
constexpr int64_t kMiB = 1 << 20;

}  // namespace

TEST_CASE("the ledger's phases by module, and gradients named by their parameter") {
  const auto s = net_run();
  const SiteTable sites(s);
  const auto l = build_ledger(s, sites, 2);
  REQUIRE(l);
  CHECK(l->module_depth == 2);
  const auto& steady = l->devices.at(0).steady;
  // Forward: what each module saved (enc's 1 MiB temporary came and went).
  const auto& fwd = phase_of(steady, Phase::kForward);
  CHECK(by_module(fwd) == Rows{{"enc", 3 * kMiB}, {"dec.0", 2 * kMiB}, {"dec.1", 1 * kMiB}});
  // Backward: each module's saved tensors freed and its gradient made (enc -3 +4, dec.0 -2 +2,
  // dec.1 -1 +1); the autograd buffer came and went.
  const auto& bwd = phase_of(steady, Phase::kBackward);
  CHECK(by_module(bwd) == Rows{{"enc", 1 * kMiB}});
  Rows grads;
  for (const auto& sb : bwd.added_by_site)
    if (sb.category == snap::Category::kGradient) grads.emplace_back(sb.site, sb.bytes);
  CHECK(grads == Rows{{"grad of enc.weight", 4 * kMiB},
                      {"grad of dec.0.weight", 2 * kMiB},
                      {"grad of dec.1.weight", 1 * kMiB}});
  // At depth 1 the ModuleList's children are one row (ties in name order).
  const auto l1 = build_ledger(s, sites, 1);
  CHECK(by_module(phase_of(l1->devices.at(0).steady, Phase::kForward)) ==
        Rows{{"dec", 3 * kMiB}, {"enc", 3 * kMiB}});
  // Text and JSON (report's and the page's data).
  std::ostringstream text;
  print_ledger_text(*l, 0, 10, text);
  CHECK(text.str().find("        by module: enc +3.00 MiB, dec.0 +2.00 MiB, dec.1 +1.00 MiB\n") !=
        std::string::npos);
  CHECK(text.str().find("grad of dec.0.weight (gradient)") != std::string::npos);
  const auto j = ledger_json(*l, 10);
  CHECK(j["module_depth"] == 2);
  const auto& jf = j["devices"][0]["steady_step"]["phases"];
  bool seen = false;
  for (const auto& p : jf) {
    if (p["phase"] != "forward") continue;
    seen = true;
    CHECK(p["added_by_module"][0] == nlohmann::json{{"module", "enc"}, {"bytes", 3 * kMiB}});
  }
  CHECK(seen);
  // Without module names: no lists by module, gradients at their site.
  auto plain = s;
  plain.tool->tensor_names.clear();
  for (auto& st : plain.stacks)
    for (auto& f : st) f.module.clear();
  const auto lp = build_ledger(plain, SiteTable(plain), 2);
  CHECK(lp->module_depth == 0);
  CHECK(phase_of(lp->devices.at(0).steady, Phase::kForward).added_by_module.empty());
}

TEST_CASE("gradients made again where the last walk saw them keep their parameter's name") {
  // The phases walk the gradients only when their pointers moved: with zero_grad(set_to_none)
  // step 2's gradients land where step 1's were and no walk or name table comes while they live
  // (GPT-2 on an H100: every steady backward gradient was at its autograd node's line).
  const auto s = net_run(false, true, true);  // the autograd buffer filed with dec.0
  const auto l = build_ledger(s, SiteTable(s), 2);
  REQUIRE(l);
  const auto& bwd = phase_of(l->devices.at(0).steady, Phase::kBackward);
  Rows grads;
  for (const auto& sb : bwd.added_by_site)
    if (sb.category == snap::Category::kGradient) grads.emplace_back(sb.site, sb.bytes);
  CHECK(grads == Rows{{"grad of enc.weight", 4 * kMiB},
                      {"grad of dec.0.weight", 2 * kMiB},
                      {"grad of dec.1.weight", 1 * kMiB}});
  CHECK(by_module(bwd) == Rows{{"enc", 1 * kMiB}});
  // The view by module puts them on their parameters' modules at the end of step 2.
  const auto v = build_module_view(s, 2);
  REQUIRE(v);
  CHECK(find(*v, "enc")->gradients == 4 * MiB);
  CHECK(find(*v, "dec.0")->gradients == 2 * MiB);
  CHECK(find(*v, "dec.1")->gradients == 1 * MiB);
  CHECK(find(*v, "(backward)") == nullptr);  // nothing of backward left without a module
}

TEST_CASE("check --max-module-bytes: every module at the depth; over the limit named") {
  std::vector<LoadedSnapshot> in;
  in.emplace_back("net.json", net_run());
  CheckOptions o;
  // At depth 2 enc holds 4 + 4 + 8 + 3 = 19 MiB, dec.0 2 + 2 + 4 + 2 = 10 MiB (not over 10).
  o.max_module_bytes = 10 * MiB;
  std::ostringstream out, err;
  CHECK(run_check(in, o, out, err) == 1);
  CHECK(out.str().find(
            "net.json: error: 1 module over the limit at depth 2 at the end of step 2: module enc "
            "holds 19.0 MiB (parameters 4.00 MiB, gradients 4.00 MiB, optimizer state 8.00 MiB, "
            "activations 3.00 MiB) (limit 10.0 MiB)\n") != std::string::npos);
  o.max_module_bytes = 19 * MiB;
  std::ostringstream pass;
  CHECK(run_check(in, o, pass, err) == 0);
  // At depth 1, dec (15 MiB) is over 14 MiB as well.
  o.module_depth = 1;
  o.max_module_bytes = 14 * MiB;
  std::ostringstream two;
  CHECK(run_check(in, o, two, err) == 1);
  CHECK(two.str().find("error: 2 modules over the limit at depth 1") != std::string::npos);
  CHECK(two.str().find("    module dec holds 15.0 MiB") != std::string::npos);
  // No module names: not judged, a failure that says why.
  auto& plain = in[0].snapshot;
  plain.tool->tensor_names.clear();
  for (auto& st : plain.stacks)
    for (auto& f : st) f.module.clear();
  std::ostringstream none;
  CHECK(run_check(in, o, none, err) == 1);
  CHECK(none.str().find("error: module bytes cannot be judged: no module names") !=
        std::string::npos);
}

TEST_CASE("cuBLAS workspaces are their own category and no module's") {
  const auto plain = build_module_view(net_run(), 1);
  auto s = net_run(true);
  const auto v = build_module_view(s, 1);
  REQUIRE(plain);
  REQUIRE(v);
  // Every row, every column as without them: MemTracker does not see them either (a forward
  // peak 32 MiB high in enc, and 64 MiB in dec and backward, before they had a category).
  REQUIRE(v->rows.size() == plain->rows.size());
  for (size_t i = 0; i < v->rows.size(); ++i) {
    const auto &a = v->rows[i], &b = plain->rows[i];
    CAPTURE(a.module);
    CHECK(a.module == b.module);
    CHECK(a.parameters == b.parameters);
    CHECK(a.activations == b.activations);
    CHECK(a.forward_peak == b.forward_peak);
    CHECK(a.backward_peak == b.backward_peak);
  }
  CHECK(find(*v, "enc")->forward_peak == 26 * MiB);
  label_categories(s);
  size_t workspace_entries = 0;
  for (const auto& e : s.device_traces[0]) {
    if (e.addr == 0x10a000000 || e.addr == 0x10c000000) {
      CHECK(e.category == snap::Category::kCublasWorkspace);
      ++workspace_entries;
    }
  }
  CHECK(workspace_entries == 2);  // the two allocs, never freed
  CHECK(category_label(snap::Category::kCublasWorkspace) == "cuBLAS workspace");
}

TEST_CASE("a module's bytes are its tensors' requests, not their blocks' unsplit remainders") {
  auto s = net_run();
  // enc.weight (4 MiB) took a 5 MiB block whose 1 MiB rest was too small to split off: 5 MiB
  // of memory_allocated(), 4 MiB of named_parameters() and of MemTracker.
  for (auto& e : s.device_traces[0])
    if (e.addr == 0x100100000) e.block_units = static_cast<uint32_t>(5 * MiB / snap::kBlockUnit);
  const auto v = build_module_view(s, 1);
  REQUIRE(v);
  CHECK(find(*v, "enc")->parameters == 4 * MiB);
  CHECK(find(*v, "enc")->forward_peak == 26 * MiB);
}

TEST_CASE("backward buffers by the module whose forward made their node") {
  // The 1 MiB autograd buffer's stack names dec.0 behind its node: dec.0's row, never
  // "(backward)", and the engine stack (only its node's module) leaves the root's name alone.
  const auto s = net_run(false, true);
  const auto v = build_module_view(s, 2);
  REQUIRE(v);
  CHECK(find(*v, "(backward)") == nullptr);
  REQUIRE(find(*v, "Net"));  // the root's own `scale`, by its class name
  CHECK(find(*v, "Net")->parameters == 1 * MiB);
  REQUIRE(find(*v, "dec.0"));
  CHECK(find(*v, "dec.0")->backward_peak == 29 * MiB);
  const auto l = build_ledger(s, SiteTable(s), 2);
  REQUIRE(l);
  // The buffer came and went inside backward: its 29 MiB moment is dec.0's; nothing it added.
  CHECK(by_module(phase_of(l->devices.at(0).steady, Phase::kBackward)) == Rows{{"enc", 1 * kMiB}});
}

TEST_CASE("backward peaks hold an op's own buffers and end with the module's last node") {
  // A GPT block's MLP and a GPT-2's embeddings, shaped as the H100 run has them
  // (tests/gpu/validate_modules.py): each Linear's backward sums its gradient over the rows for
  // the bias through a reduction buffer and semaphores it frees before returning (Reduce.cuh;
  // MemTracker, a dispatch mode, never sees them), and wte's backward runs after wpe's (whose
  // forward got no input that requires grad: MemTracker keeps its window open to the end).
  TorchRunBuilder b;
  const auto ag = TorchRunBuilder::kAutogradTid;
  auto node = [&](const std::string& fn, const std::string& module) {
    return b.stack({{"libtorch_cpu.so", 0, "torch::autograd::generated::" + fn + "::apply"},
                    call(module),
                    {"train.py", 42, "step"}});
  };
  const auto setup = b.line("train.py", 10, "<module>");
  b.segment(1, 0x200000000, 512 * MiB);
  b.alloc(10, 0x200000000, 10 * MiB, setup);  // the model, 10 MiB
  b.phase(100, 200, "auto:forward");
  b.alloc(110, 0x200a00000, 4 * MiB, b.stack(in_modules(20, {"GPT2", "wte"})));         // 14
  b.alloc(111, 0x200e00000, 1 * MiB, b.stack(in_modules(21, {"GPT2", "wpe"})));         // 15
  b.alloc(120, 0x201000000, 16 * MiB, b.stack(in_modules(30, {"GPT2", "h.0.mlp.0"})));  // 31
  b.alloc(121, 0x202000000, 16 * MiB, b.stack(in_modules(31, {"GPT2", "h.0.mlp.1"})));  // 47
  b.alloc(122, 0x203000000, 4 * MiB, b.stack(in_modules(32, {"GPT2", "h.0.mlp.2"})));   // 51
  b.phase(300, 400, "auto:backward");
  const auto mlp2 = node("AddmmBackward0", "h.0.mlp.2");
  b.alloc(301, 0x204000000, 16 * MiB, mlp2, ag);  // grad input: 67
  b.alloc(302, 0x205000000, 4 * MiB, mlp2, ag);   // weight's gradient: 71
  b.alloc(303, 0x206000000, 8 * MiB, mlp2, ag);   // the bias sum's reduction buffer: 79
  b.alloc(304, 0x206800000, 16, mlp2, ag);        // and its semaphores: 79 MiB + 512
  b.free(305, 0x206800000, ag);
  b.free(306, 0x206000000, ag);  // 71
  b.free(307, 0x202000000, ag);  // GELU's output, mlp.2's saved input: 55
  b.free(308, 0x203000000, ag);  // 51
  const auto mlp1 = node("GeluBackward0", "h.0.mlp.1");
  b.alloc(310, 0x202000000, 16 * MiB, mlp1, ag);  // 67 (MemTracker's block peak is here)
  b.free(311, 0x204000000, ag);                   // 51
  b.free(312, 0x201000000, ag);                   // GELU's saved input: 35
  const auto mlp0 = node("AddmmBackward0", "h.0.mlp.0");
  b.alloc(320, 0x201000000, 4 * MiB, mlp0, ag);   // 39
  b.alloc(321, 0x201400000, 4 * MiB, mlp0, ag);   // 43
  b.alloc(322, 0x201800000, 8192, mlp0, ag);      // 43 MiB + 8 KiB
  b.alloc(323, 0x203000000, 32 * MiB, mlp0, ag);  // 75 MiB + 8 KiB
  b.alloc(324, 0x201802000, 64, mlp0, ag);        // 75 MiB + 8 KiB + 512
  b.free(325, 0x201802000, ag);
  b.free(326, 0x203000000, ag);
  b.free(327, 0x202000000, ag);                                               // 27 MiB + 8 KiB
  b.alloc(330, 0x207000000, 1 * MiB, node("EmbeddingBackward0", "wpe"), ag);  // 28 MiB + 8 KiB
  const auto wte = node("EmbeddingBackward0", "wte");
  b.alloc(340, 0x207100000, 4 * MiB, wte, ag);  // 32 MiB + 8 KiB
  b.alloc(341, 0x207500000, 2 * MiB, wte, ag);  // its sort buffer: 34 MiB + 8 KiB
  b.free(342, 0x207500000, ag);
  b.phase(500, 600, "auto:optimizer");
  b.mark(600, "auto:step");
  const auto s = b.finish();

  const auto v = build_module_view(s, 4);
  REQUIRE(v);
  auto bwd = [&](const std::string& m) {
    const auto* r = find(*v, m);
    REQUIRE(r);
    return r->backward_peak;
  };
  CHECK(bwd("h.0.mlp.2") == 79 * MiB + 512);
  CHECK(bwd("h.0.mlp.1") == 67 * MiB);
  CHECK(bwd("h.0.mlp.0") == 75 * MiB + 8192 + 512);
  CHECK(bwd("wpe") == 28 * MiB + 8192);  // its own node's, not wte's after it
  CHECK(bwd("wte") == 34 * MiB + 8192);
  const auto v2 = build_module_view(s, 2);
  REQUIRE(v2);
  REQUIRE(find(*v2, "h.0"));
  CHECK(find(*v2, "h.0")->backward_peak == 79 * MiB + 512);
}
