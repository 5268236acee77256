#include "pytorch/modules.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <ostream>
#include <set>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/frames.h"
#include "analysis/model.h"
#include "pytorch/categories.h"
#include "pytorch/phases.h"
#include "snapshot/size_format.h"

namespace cumemtrace::analysis {

namespace {

using snap::Category;

using NameTable = TensorModules::NameTable;

std::vector<NameTable> tables_of(const snap::Snapshot& s, snap::OwnerRole role) {
  std::vector<NameTable> out;
  if (!s.tool) return out;
  for (const auto& t : s.tool->tensor_names) {
    if (t.role != role) continue;
    NameTable n;
    n.time_us = t.time_us;
    for (const auto& [key, name] : t.names) {
      uint64_t p = 0;
      const auto r = std::from_chars(key.data(), key.data() + key.size(), p);
      if (r.ec == std::errc{} && r.ptr == key.data() + key.size()) n.by_pointer.emplace(p, name);
    }
    out.push_back(std::move(n));
  }
  return out;
}

// The parameter name of a tensor of `role`: the latest table made while it was alive that names
// a pointer inside it; else, for a gradient made again where the walks saw one (categories.h rule
// 3: no walk, so no table, comes while it lives when the gradients' pointers did not move), the
// latest table made before its allocation when that names its address; empty otherwise.
std::string_view parameter_in(const std::vector<NameTable>& tables, const TensorLife& t,
                              bool regrown) {
  for (auto it = tables.rbegin(); it != tables.rend(); ++it) {
    if (it->time_us < t.alloc_us || it->time_us > t.free_us) continue;
    auto p = it->by_pointer.lower_bound(t.addr);
    if (p != it->by_pointer.end() && p->first < t.addr + t.size) return p->second;
  }
  if (!regrown) return {};
  const NameTable* latest = nullptr;  // ring order is nearly, not strictly, time order
  for (const auto& n : tables)
    if (n.time_us < t.alloc_us && (!latest || n.time_us >= latest->time_us)) latest = &n;
  if (!latest) return {};
  const auto p = latest->by_pointer.find(t.addr);
  return p == latest->by_pointer.end() ? std::string_view() : std::string_view(p->second);
}

// A root's own name where the snapshot knows one: the outermost module call's name when every
// stack's outermost module call names the same module; else "(root)". A stack with an autograd
// node's frame (autograd's engine thread) carries only its node's innermost module, never the
// root's call: it says nothing of the root.
std::string root_label(const snap::Snapshot& s) {
  std::set<std::string_view> outermost;
  for (const auto& st : s.stacks) {
    if (std::any_of(st.begin(), st.end(), is_autograd_node_frame)) continue;
    for (auto f = st.rbegin(); f != st.rend(); ++f) {
      if (!f->module.empty()) {
        outermost.insert(f->module);
        break;
      }
    }
  }
  if (outermost.size() == 1 && outermost.begin()->find('.') == std::string_view::npos) {
    return std::string(*outermost.begin());
  }
  return std::string(kRootModule);
}

// The tensor bytes live right after each trace entry (contract: forward_peak), cuBLAS workspaces
// left out. A tensor counts from its alloc to its end (free_requested, else free_completed); one
// allocated before the trace counts from the start.
std::vector<uint64_t> tensor_bytes_after(const std::vector<snap::TraceEntry>& tr,
                                         const DeviceTensors& dt) {
  std::vector<int64_t> delta(tr.size() + 1, 0);
  int64_t base = 0;
  for (const auto& t : dt.lives) {
    if (t.category == Category::kCublasWorkspace) continue;
    const auto b = static_cast<int64_t>(tensor_bytes(t));
    if (t.alloc >= 0) {
      delta[static_cast<size_t>(t.alloc)] += b;
    } else {
      base += b;
    }
    const std::ptrdiff_t end = t.free_requested >= 0 ? t.free_requested : t.free_completed;
    if (end >= 0) delta[static_cast<size_t>(end)] -= b;
  }
  std::vector<uint64_t> after(tr.size(), 0);
  int64_t cur = base;
  for (size_t i = 0; i < tr.size(); ++i) {
    cur += delta[i];
    after[i] = static_cast<uint64_t>(std::max<int64_t>(cur, 0));
  }
  return after;
}

}  // namespace

TensorModules::TensorModules(const snap::Snapshot& s)
    : s_(s),
      names_{tables_of(s, snap::OwnerRole::kParameter), tables_of(s, snap::OwnerRole::kGradient),
             tables_of(s, snap::OwnerRole::kOptimizerState)},
      root_(root_label(s)) {}

std::string_view TensorModules::parameter_of(const TensorLife& t) const {
  const int role = t.category == Category::kParameter        ? 0
                   : t.category == Category::kGradient       ? 1
                   : t.category == Category::kOptimizerState ? 2
                                                             : -1;
  return role < 0 ? std::string_view() : parameter_in(names_[role], t, role == 1);
}

std::string TensorModules::module_of(const TensorLife& t, Phase phase) const {
  if (t.category == Category::kCublasWorkspace) return std::string(kNoModule);  // (contract)
  if (const std::string_view param = parameter_of(t); !param.empty()) {
    const size_t dot = param.rfind('.');
    return dot == std::string_view::npos ? root_ : std::string(param.substr(0, dot));
  }
  if (const std::string_view m = stack_module(s_, t.stack); !m.empty()) return std::string(m);
  return std::string(phase == Phase::kBackward ? kBackwardNoModule : kNoModule);
}

std::string module_at_depth(std::string_view name, int depth) {
  if (name.starts_with('(')) return std::string(name);  // "(no module)" and kin
  size_t at = 0;
  for (int i = 0; i < depth; ++i) {
    at = name.find('.', at);
    if (at == std::string_view::npos) return std::string(name);
    if (i + 1 < depth) ++at;
  }
  return std::string(name.substr(0, at));
}

std::string_view stack_module(const snap::Snapshot& s, int32_t stack) {
  if (stack < 0 || static_cast<size_t>(stack) >= s.stacks.size()) return {};
  for (const auto& f : s.stacks[static_cast<size_t>(stack)]) {
    if (!f.module.empty()) return f.module;
  }
  return {};
}

bool has_module_names(const snap::Snapshot& s) {
  if (s.tool && !s.tool->tensor_names.empty()) return true;
  for (const auto& st : s.stacks) {
    for (const auto& f : st) {
      if (!f.module.empty()) return true;
    }
  }
  return false;
}

std::optional<ModuleView> build_module_view(const AnalysedSnapshot& a, int depth,
                                            std::string* why) {
  const snap::Snapshot& s = a.snapshot();
  if (!has_pytorch(s) || !has_module_names(s)) {
    if (why) {
      *why =
          "no module names in this snapshot (a PyTorch run traced with the automatic phases "
          "on CPython 3.11+ has them)";
    }
    return std::nullopt;
  }
  ModuleView v;
  v.depth = std::max(depth, 1);
  const Phases& ph = phases_of(a);
  const auto& steps = ph.steps();
  // The reference step: the last complete one (training); else the whole run.
  int ref_step = -1;
  int64_t ref_time = kTimeMax;
  if (ph.training() && ph.complete_steps() > 0) {
    for (int k = static_cast<int>(steps.size()) - 1; k >= 0; --k) {
      if (steps[static_cast<size_t>(k)].complete) {
        ref_step = k;
        ref_time = steps[static_cast<size_t>(k)].end_us - 1;
        break;
      }
    }
  }
  v.reference = ref_step >= 0 ? fmt::format("end of step {}", ref_step + 1) : "end of the trace";
  const TensorModules& modules = a.derived<TensorModules>();  // one per view
  std::unordered_map<std::string, ModuleRow> rows;
  auto row = [&](const std::string& key) -> ModuleRow& {
    auto [it, inserted] = rows.try_emplace(key);
    if (inserted) it->second.module = key;
    return it->second;
  };

  const int n = device_count(s);
  for (int d = 0; d < n; ++d) {
    const auto dt = device_tensors(s, d, ph);
    if (dt.lives.empty()) continue;
    // Live tensor bytes as MemTracker counts them (the trainers' rule above), not the replay's
    // blocks: the view needs no replay.
    const auto& tr = s.device_traces[static_cast<size_t>(d)];
    const auto live_bytes = tensor_bytes_after(tr, dt);
    for (const auto& t : dt.lives) {
      const Category c = t.category;
      Phase phase = Phase::kOther;
      if (t.alloc >= 0) phase = ph.of(tr[static_cast<size_t>(t.alloc)]).phase;
      if (c == Category::kCublasWorkspace) continue;  // no module's (contract)
      const std::string module = modules.module_of(t, phase);
      ModuleRow& r = row(module_at_depth(module, v.depth));
      // Alive at the reference moment (without steps: at the end of the trace).
      const bool live_at_ref = ref_time == kTimeMax
                                   ? t.free_us == kTimeMax
                                   : t.alloc_us <= ref_time && t.free_us > ref_time;
      if (live_at_ref) {
        if (c == Category::kParameter) r.parameters += tensor_bytes(t);
        if (c == Category::kGradient) r.gradients += tensor_bytes(t);
        if (c == Category::kOptimizerState) r.optimizer_state += tensor_bytes(t);
      }
      if (t.alloc < 0) continue;
      const bool in_ref = ref_step < 0 || ph.step_at(t.alloc_us) == ref_step;
      if (!in_ref) continue;
      if (c == Category::kActivation) r.activations += tensor_bytes(t);
      const uint64_t allocated = live_bytes[static_cast<size_t>(t.alloc)];
      if (phase == Phase::kForward) r.forward_peak = std::max(r.forward_peak, allocated);
      if (phase == Phase::kBackward) r.backward_peak = std::max(r.backward_peak, allocated);
    }
  }
  for (auto& [key, r] : rows) {
    if (r.total() || r.forward_peak || r.backward_peak) v.rows.push_back(std::move(r));
  }
  std::sort(v.rows.begin(), v.rows.end(), [](const ModuleRow& a, const ModuleRow& b) {
    if (a.total() != b.total()) return a.total() > b.total();
    if (a.forward_peak != b.forward_peak) return a.forward_peak > b.forward_peak;
    return a.module < b.module;
  });
  return v;
}

void print_module_view_text(const ModuleView& v, size_t top, std::ostream& out) {
  out << fmt::format(
      "By module (depth {}; parameters, gradients, optimizer state at the {}; "
      "activations saved and peaks within it):\n",
      v.depth, v.reference);
  out << fmt::format("  {:<40} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "module", "params",
                     "grads", "opt state", "activations", "fwd peak", "bwd peak");
  auto b = [](uint64_t x) { return x ? snap::format_bytes(x) : std::string("-"); };
  size_t shown = 0;
  for (const auto& r : v.rows) {
    if (shown++ == top) {
      out << fmt::format("  ... {} more (--top)\n", v.rows.size() - top);
      break;
    }
    out << fmt::format("  {:<40} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12}\n", r.module,
                       b(r.parameters), b(r.gradients), b(r.optimizer_state), b(r.activations),
                       b(r.forward_peak), b(r.backward_peak));
  }
}

nlohmann::json module_view_json(const ModuleView& v, size_t top) {
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < v.rows.size() && i < top; ++i) {
    const auto& r = v.rows[i];
    rows.push_back({{"module", r.module},
                    {"parameters", r.parameters},
                    {"gradients", r.gradients},
                    {"optimizer_state", r.optimizer_state},
                    {"activations", r.activations},
                    {"forward_peak", r.forward_peak},
                    {"backward_peak", r.backward_peak}});
  }
  return {{"depth", v.depth},
          {"reference", v.reference},
          {"rows", rows},
          {"rows_total", v.rows.size()}};
}

}  // namespace cumemtrace::analysis
