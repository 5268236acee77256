#include "pytorch/ledger.h"

#include <algorithm>
#include <limits>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/breakdown_format.h"
#include "pytorch/categories.h"
#include "pytorch/modules.h"
#include "snapshot/size_format.h"

namespace cumemtrace::analysis {

using snap::Category;
using snap::format_bytes;
using snap::format_signed_bytes;

namespace {

int64_t abs_bytes(int64_t v) {
  return v < 0 ? wrap_sub(0, v) : v;
}

// Sums by category and by (site, category), and their sorted lists.
struct Tally {
  std::map<Category, int64_t> by_category;          // blocks
  std::map<Category, int64_t> by_category_tensors;  // the tensors' own bytes (add_tensor)
  std::map<std::pair<std::string, Category>, SiteBytes> by_site;

  std::map<std::string, int64_t> by_module;

  void add(const SiteTable& sites, Category c, int32_t stack, int64_t bytes, bool counted,
           const std::string* label = nullptr) {
    by_category[c] = wrap_add(by_category[c], bytes);
    const std::string& site = label ? *label : sites.site(stack);
    auto& sb = by_site[{site, c}];
    if (sb.site.empty()) {
      sb.site = site;
      sb.category = c;
      sb.stack = stack;
    }
    sb.bytes = wrap_add(sb.bytes, bytes);
    sb.count += counted ? 1 : 0;
  }
  std::vector<CategoryBytes> categories() const {
    std::vector<CategoryBytes> v;
    for (const auto& [c, b] : by_category) {
      const auto t = by_category_tensors.find(c);
      // What no tensor explains (the moments' "unknown" remainder) has no tensor bytes.
      if (b) v.push_back({c, b, t == by_category_tensors.end() ? 0 : t->second});
    }
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
      return abs_bytes(a.bytes) > abs_bytes(b.bytes);
    });
    return v;
  }
  // A tensor's line in the phases' and the moments' lists (contract): a gradient's is its
  // parameter's name where known; and its module's sum, when the view by module is asked for.
  // `sign`: +1 for an allocation or a live tensor, -1 for a free; `bytes` its block's bytes.
  void add_tensor(const SiteTable& sites, const TensorLife& l, int64_t bytes, int sign,
                  bool counted, const TensorModules* modules, Phase phase, int depth) {
    const int64_t own = sign * static_cast<int64_t>(tensor_bytes(l));
    by_category_tensors[l.category] = wrap_add(by_category_tensors[l.category], own);
    std::string label;
    if (modules && l.category == Category::kGradient) {
      if (const auto param = modules->parameter_of(l); !param.empty())
        label = fmt::format("grad of {}", param);
    }
    add(sites, l.category, l.stack, bytes, counted, label.empty() ? nullptr : &label);
    if (modules && depth > 0) {
      // By module in the tensors' own bytes, as the view by module counts (modules.h).
      auto& m = by_module[module_at_depth(modules->module_of(l, phase), depth)];
      m = wrap_add(m, own);
    }
  }
  std::vector<ModuleBytes> modules() const {
    std::vector<ModuleBytes> v;
    for (const auto& [m, b] : by_module)
      if (b) v.push_back({m, b});
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
      return abs_bytes(a.bytes) > abs_bytes(b.bytes);
    });
    return v;
  }
  std::vector<SiteBytes> sites() const {
    std::vector<SiteBytes> v;
    for (const auto& [k, sb] : by_site)
      if (sb.bytes) v.push_back(sb);
    std::stable_sort(v.begin(), v.end(), [](const auto& a, const auto& b) {
      return abs_bytes(a.bytes) > abs_bytes(b.bytes);
    });
    return v;
  }
};

bool owned(Category c) {
  return c == Category::kParameter || c == Category::kGradient || c == Category::kOptimizerState;
}

std::vector<LedgerPhase> phase_rows(int step, const Phases& ph, const DeviceReplay& rp,
                                    const DeviceTensors& dt, const SiteTable& sites,
                                    const TensorModules* modules, int depth) {
  std::vector<LedgerPhase> rows;
  const auto& tr = rp.trace();
  const auto n = static_cast<std::ptrdiff_t>(tr.size());
  for (const auto& sp : ph.spans()) {
    if (sp.step != step) continue;
    LedgerPhase p;
    p.phase = sp.phase;
    p.step = sp.step;
    p.micro = sp.micro;
    p.micro_steps = ph.steps()[static_cast<size_t>(sp.step)].micro_steps;
    p.begin_us = sp.begin_us;
    p.end_us = sp.end_us;
    p.before_index = sp.begin_us == kTimeMin ? -1 : rp.index_at_time(sp.begin_us - 1);
    p.last_index = sp.end_us == kTimeMax ? n - 1 : rp.index_at_time(sp.end_us - 1);
    const bool stretch = gap_phase(sp.phase) || sp.phase == Phase::kLoss;
    if (stretch && p.last_index <= p.before_index) continue;
    p.allocated_before = rp.allocated_after(p.before_index);
    p.allocated_after = rp.allocated_after(p.last_index);
    p.reserved_before = rp.reserved_after(p.before_index);
    p.reserved_after = rp.reserved_after(p.last_index);
    p.allocated_peak = {p.allocated_before,
                        sp.begin_us == kTimeMin ? rp.time_after(-1) : sp.begin_us, p.before_index};
    Tally t;
    for (std::ptrdiff_t i = p.before_index + 1; i <= p.last_index; ++i) {
      p.allocated_peak.raise(rp.allocated_after(i), tr[static_cast<size_t>(i)].time_us, i);
      const int32_t id = dt.life_of[static_cast<size_t>(i)];
      if (id < 0) continue;
      const auto& e = tr[static_cast<size_t>(i)];
      const auto& l = dt.lives[static_cast<size_t>(id)];
      // The module's phase is the one the tensor was made in (a gradient freed in zero_grad is
      // its parameter's module all the same; "(backward)" only for backward's own buffers).
      const Phase made_in = l.alloc >= 0 ? ph.of(tr[static_cast<size_t>(l.alloc)]).phase : sp.phase;
      if (e.action == snap::Action::kAlloc)
        t.add_tensor(sites, l, static_cast<int64_t>(snap::held_bytes(e)), 1, true, modules, made_in,
                     depth);
      else if (e.action == snap::Action::kFreeCompleted)
        t.add_tensor(sites, l, wrap_sub(0, static_cast<int64_t>(snap::held_bytes(e))), -1, false,
                     modules, made_in, depth);
    }
    p.added_by_category = t.categories();
    p.added_by_site = t.sites();
    p.added_by_module = t.modules();
    rows.push_back(std::move(p));
  }
  return rows;
}

}  // namespace

LedgerMoment moment_at(std::string name, std::ptrdiff_t index, const Phases& ph,
                       const DeviceReplay& rp, const DeviceTensors& dt, const SiteTable& sites,
                       const TensorModules* names) {
  LedgerMoment m;
  m.moment = std::move(name);
  m.index = index;
  m.time_us = rp.time_after(index);
  const auto& sp = ph.spans()[ph.span_at(m.time_us)];
  m.phase = sp.phase;
  m.step = sp.step;
  m.allocated = rp.allocated_after(index);
  m.reserved = rp.reserved_after(index);
  Tally t;
  uint64_t sum = 0;
  for (const auto& l : dt.lives) {
    if (l.alloc > index) continue;
    if (l.free_completed >= 0 && l.free_completed <= index) continue;
    if (l.alloc < 0 && l.free_completed < 0) continue;
    t.add_tensor(sites, l, static_cast<int64_t>(l.size), 1, true, names, Phase::kOther, 0);
    sum += l.size;
  }
  if (m.allocated > sum) {
    static const std::string kBefore = kBeforeTraceSite;
    t.add(sites, Category::kUnknown, snap::kNoStack, static_cast<int64_t>(m.allocated - sum), false,
          &kBefore);
  }
  m.by_category = t.categories();
  m.by_site = t.sites();
  m.layers = rp.breakdown_after(index, sites, "peak");
  return m;
}

Growth growth_per_step(const Phases& ph, const DeviceReplay& rp, const DeviceTensors& dt,
                       const SiteTable& sites, int64_t t0, int64_t t1) {
  Growth g;
  // The complete steps that end within [t0, t1] (phases.h: a step's last microsecond).
  std::vector<int> steps;
  for (size_t k = 0; k < ph.steps().size(); ++k) {
    const auto& st = ph.steps()[k];
    if (st.complete && st.end_us - 1 >= t0 && st.end_us - 1 <= t1)
      steps.push_back(static_cast<int>(k));
  }
  const size_t k = steps.size();
  if (k < 3) {
    g.why = fmt::format(
        "{} complete; growth per step needs 3 (a warm-up step, a counted one and one after it)",
        plural(k, "step"));
    return g;
  }
  g.judged = true;
  g.warmup = warmup_steps(k);
  g.first_counted = steps[static_cast<size_t>(g.warmup)];
  g.last_counted = steps[k - 2];
  g.end_step = steps[k - 1];
  g.steps_counted = static_cast<int>(k) - 1 - g.warmup;
  const auto end_index = rp.index_at_time(ph.steps()[static_cast<size_t>(g.end_step)].end_us - 1);
  Tally t;
  for (const auto& l : dt.lives) {
    if (l.alloc < 0 || l.alloc > end_index) continue;
    const int st = ph.step_at(l.alloc_us);
    if (st < g.first_counted || st > g.last_counted) continue;
    if (l.free_completed >= 0 && l.free_completed <= end_index) continue;
    t.add(sites, l.category, l.stack, static_cast<int64_t>(l.size), true);
    g.bytes += l.size;
  }
  const auto n = static_cast<uint64_t>(g.steps_counted);
  g.per_step = g.bytes / n;
  g.by_site = t.sites();
  for (auto& sb : g.by_site) sb.bytes = static_cast<int64_t>(static_cast<uint64_t>(sb.bytes) / n);
  return g;
}

int warmup_steps(size_t complete_steps) {
  return complete_steps >= 4 ? 2 : 1;
}

std::string category_label(Category c) {
  if (c == Category::kProgram) return "program's own";
  if (c == Category::kParameterUnsharded) return "parameter (unsharded)";
  if (c == Category::kCublasWorkspace) return "cuBLAS workspace";
  if (c == Category::kCommunication) return "communication buffer";
  if (c == Category::kKvCache) return "KV cache";
  std::string s(snap::category_name(c));
  if (s.empty()) s = "unlabelled";
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

std::string phase_label(const LedgerPhase& p) {
  std::string s(phase_name(p.phase));
  if (p.micro >= 0 && p.micro_steps > 1) s += fmt::format(" {}", p.micro + 1);
  return s;
}

std::optional<Ledger> build_ledger(const AnalysedSnapshot& a, const SiteTable& sites,
                                   int module_depth) {
  const snap::Snapshot& s = a.snapshot();
  if (!has_pytorch(s)) return std::nullopt;
  const Phases& ph = phases_of(a);
  if (!ph.automatic()) return std::nullopt;
  Ledger l;
  const TensorModules* m = nullptr;  // the view's one (analysed_snapshot.h derived)
  if (has_module_names(s)) {
    m = &a.derived<TensorModules>();
    l.module_depth = std::max(module_depth, 1);
  }
  l.training = ph.training();
  l.steps = ph.steps().size();
  l.complete_steps = ph.complete_steps();
  const int n = device_count(s);
  for (int d = 0; d < n; ++d) {
    const auto dt = device_tensors(s, d, ph);
    if (dt.lives.empty()) continue;
    const DeviceReplay& rp = a.replay(d);
    const auto& tr = rp.trace();
    DeviceLedger dl;
    dl.device = d;
    dl.first_step = 0;
    dl.first = phase_rows(0, ph, rp, dt, sites, m, l.module_depth);
    if (l.complete_steps >= 2) {
      dl.steady_step = static_cast<int>(l.complete_steps) - 1;
      dl.steady = phase_rows(*dl.steady_step, ph, rp, dt, sites, m, l.module_depth);
    }
    dl.allocated_peak =
        moment_at("allocated peak", rp.timeline().allocated.index, ph, rp, dt, sites, m);
    dl.reserved_peak =
        moment_at("reserved peak", rp.timeline().reserved.index, ph, rp, dt, sites, m);
    dl.growth = growth_per_step(ph, rp, dt, sites);
    if (l.training && l.complete_steps > 0)
      dl.held = held_outside_blocks(s, d, ph, dt, static_cast<int>(l.complete_steps) - 1);

    // Leaks (contract): after the warm-up, never past the last step begun.
    dl.warmup = std::min(warmup_steps(l.complete_steps), static_cast<int>(l.steps) - 1);
    const int64_t after_warmup = ph.steps()[static_cast<size_t>(dl.warmup)].begin_us;
    for (const auto& t : dt.lives) {
      if (t.alloc < 0 || t.free_completed >= 0 || owned(t.category)) continue;
      if (ph.step_at(t.alloc_us) < dl.warmup) continue;
      dl.leaked.push_back({d, t.addr, t.size, t.stack, false, true, t.alloc_us});
    }
    for (const auto& a : rp.live_after(static_cast<std::ptrdiff_t>(tr.size()) - 1)) {
      if (a.pytorch || a.before_trace || a.time_us < after_warmup) continue;
      dl.leaked.push_back(a);
    }
    for (const auto& a : dl.leaked) dl.leaked_bytes += a.size;
    l.devices.push_back(std::move(dl));
  }
  return l;
}

namespace {

std::string step_name(const Ledger& l, int step) {
  return fmt::format("{} {}", l.training ? "step" : "iteration", step + 1);
}

}  // namespace

std::string categories_text(const std::vector<CategoryBytes>& v, bool sign) {
  std::string s;
  for (const auto& c : v) {
    if (!s.empty()) s += ", ";
    const auto bytes = [&](int64_t b) {
      return sign ? format_signed_bytes(b) : format_bytes(static_cast<uint64_t>(b));
    };
    s += fmt::format("{} {}", category_label(c.category), bytes(c.bytes));
    // The blocks hold more than the tensors ask for: both numbers, each named (contract).
    if (c.tensor_bytes && c.tensor_bytes != c.bytes)
      s += fmt::format(" (tensors {})", bytes(c.tensor_bytes));
  }
  return s.empty() ? "nothing" : s;
}

void print_site_bytes(std::ostream& out, const std::vector<SiteBytes>& v, size_t top, bool sign,
                      bool categories) {
  for (size_t i = 0; i < v.size() && i < top; ++i) {
    out << fmt::format(
        "        {:>12}  {}{}\n",
        sign ? format_signed_bytes(v[i].bytes) : format_bytes(static_cast<uint64_t>(v[i].bytes)),
        v[i].site, categories ? fmt::format(" ({})", category_label(v[i].category)) : "");
  }
  if (v.size() > top) out << fmt::format("        ... {} more\n", plural(v.size() - top, "line"));
}

namespace {

void print_phases(std::ostream& out, const std::vector<LedgerPhase>& rows, size_t top) {
  for (const auto& p : rows) {
    out << fmt::format("    {:<11} allocated {} -> {} ({}), reserved {} -> {}, peak {}\n",
                       phase_label(p), format_bytes(p.allocated_before),
                       format_bytes(p.allocated_after),
                       format_signed_bytes(wrap_sub(static_cast<int64_t>(p.allocated_after),
                                                    static_cast<int64_t>(p.allocated_before))),
                       format_bytes(p.reserved_before), format_bytes(p.reserved_after),
                       format_bytes(p.allocated_peak.bytes));
    out << fmt::format("        added: {}\n", categories_text(p.added_by_category, true));
    if (!p.added_by_module.empty()) {
      std::string mods;
      for (size_t i = 0; i < p.added_by_module.size() && i < top; ++i) {
        mods += fmt::format("{}{} {}", i ? ", " : "", p.added_by_module[i].module,
                            format_signed_bytes(p.added_by_module[i].bytes));
      }
      if (p.added_by_module.size() > top)
        mods += fmt::format(", {} more", p.added_by_module.size() - top);
      out << fmt::format("        by module: {}\n", mods);
    }
    print_site_bytes(out, p.added_by_site, top, true);
  }
}

void print_moment(std::ostream& out, const Ledger& l, const LedgerMoment& m, int64_t origin,
                  size_t top) {
  out << fmt::format("    at the {} ({}, {} {}): allocated {}, reserved {}\n", m.moment,
                     format_time(m.time_us, origin), step_name(l, m.step), phase_name(m.phase),
                     format_bytes(m.allocated), format_bytes(m.reserved));
  out << fmt::format("        tensors: {}\n", categories_text(m.by_category, false));
  out << fmt::format("        cached, free in PyTorch's cache: {}\n",
                     format_bytes(m.layers.cached_free));
  if (!m.layers.by_library.empty()) {
    std::string libs;
    for (const auto& [lib, bytes] : m.layers.by_library)
      libs += fmt::format("{}{} {}", libs.empty() ? "" : ", ", lib, format_bytes(bytes));
    out << fmt::format("        other libraries: {}\n", libs);
  }
  if (m.layers.context)
    out << fmt::format("        CUDA context: {}\n", format_bytes(*m.layers.context));
  print_site_bytes(out, m.by_site, top, false);
}

}  // namespace

nlohmann::json categories_json(const std::vector<CategoryBytes>& v) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& c : v) j[std::string(snap::category_name(c.category))] = c.bytes;
  return j;
}

nlohmann::json category_tensors_json(const std::vector<CategoryBytes>& v) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& c : v)
    if (c.tensor_bytes) j[std::string(snap::category_name(c.category))] = c.tensor_bytes;
  return j;
}

nlohmann::json sites_json(const std::vector<SiteBytes>& v, size_t top) {
  nlohmann::json a = nlohmann::json::array();
  for (size_t i = 0; i < v.size() && i < top; ++i)
    a.push_back({{"site", v[i].site},
                 {"category", snap::category_name(v[i].category)},
                 {"bytes", v[i].bytes},
                 {"count", v[i].count}});
  return a;
}

namespace {

nlohmann::json modules_json(const std::vector<ModuleBytes>& v, size_t top) {
  nlohmann::json a = nlohmann::json::array();
  for (size_t i = 0; i < v.size() && i < top; ++i)
    a.push_back({{"module", v[i].module}, {"bytes", v[i].bytes}});
  return a;
}

nlohmann::json phases_json(const std::vector<LedgerPhase>& rows, size_t top) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& p : rows) {
    a.push_back(
        {{"phase", phase_name(p.phase)},
         {"micro_step", p.micro >= 0 ? nlohmann::json(p.micro + 1) : nlohmann::json()},
         {"begin_us", p.begin_us == kTimeMin ? nlohmann::json() : nlohmann::json(p.begin_us)},
         {"end_us", p.end_us == kTimeMax ? nlohmann::json() : nlohmann::json(p.end_us)},
         {"allocated_before_bytes", p.allocated_before},
         {"allocated_after_bytes", p.allocated_after},
         {"reserved_before_bytes", p.reserved_before},
         {"reserved_after_bytes", p.reserved_after},
         {"allocated_peak_bytes", p.allocated_peak.bytes},
         {"added_by_category", categories_json(p.added_by_category)},
         {"added_tensor_bytes_by_category", category_tensors_json(p.added_by_category)},
         {"added_by_site", sites_json(p.added_by_site, top)},
         {"added_by_module", modules_json(p.added_by_module, top)}});
  }
  return a;
}

nlohmann::json moment_json(const LedgerMoment& m, size_t top) {
  nlohmann::json libs = nlohmann::json::object();
  for (const auto& [lib, bytes] : m.layers.by_library) libs[lib] = bytes;
  return {
      {"time_us", m.time_us},
      {"step", m.step + 1},
      {"phase", phase_name(m.phase)},
      {"allocated_bytes", m.allocated},
      {"reserved_bytes", m.reserved},
      {"by_category", categories_json(m.by_category)},
      {"tensor_bytes_by_category", category_tensors_json(m.by_category)},
      {"cached_free_bytes", m.layers.cached_free},
      {"other_libraries", libs},
      {"context_bytes", m.layers.context ? nlohmann::json(*m.layers.context) : nlohmann::json()},
      {"by_site", sites_json(m.by_site, top)}};
}

}  // namespace

namespace {

// The ledger with its lists' small lines left out (print_ledger_text's contract).
Ledger without_small_lines(Ledger l, uint64_t min_line) {
  if (!min_line) return l;
  auto drop = [min_line](std::vector<SiteBytes>& v) {
    std::erase_if(v, [min_line](const SiteBytes& sb) {
      return static_cast<uint64_t>(abs_bytes(sb.bytes)) < min_line;
    });
  };
  for (auto& d : l.devices) {
    for (auto* rows : {&d.first, &d.steady}) {
      for (auto& p : *rows) {
        drop(p.added_by_site);
        std::erase_if(p.added_by_module, [min_line](const ModuleBytes& mb) {
          return static_cast<uint64_t>(abs_bytes(mb.bytes)) < min_line;
        });
      }
    }
    drop(d.allocated_peak.by_site);
    drop(d.reserved_peak.by_site);
    drop(d.growth.by_site);
  }
  return l;
}

// Why the held tensors are where they are (contract), as the text and the JSON say it.
std::string held_why(const HeldAtStep& h, bool in_segment) {
  if (!in_segment) {
    return "at data pointers in no PyTorch segment of this device: the trace cannot place them";
  }
  if (h.graph_pool) {
    return "in a CUDA graph pool: the graphs' replays rebuild their outputs over the pool's "
           "memory with no allocator call, so memory_allocated() counts it free and reserved "
           "holds it";
  }
  return "in memory PyTorch's allocator holds as free, with no CUDA graph pool used: the trace "
         "cannot say what holds them";
}

void print_held(std::ostream& out, const Ledger& l, const DeviceLedger& d) {
  const auto& h = d.held;
  for (const bool in_segment : {true, false}) {
    const uint64_t bytes = h.bytes(in_segment);
    if (!bytes) continue;
    const auto n = std::count_if(h.tensors.begin(), h.tensors.end(),
                                 [&](const HeldTensor& t) { return t.in_segment == in_segment; });
    out << fmt::format(
        "  device {}, held outside PyTorch's allocated blocks at the end of {}: gradient {} ({}), "
        "{}\n",
        d.device, step_name(l, h.step), format_bytes(bytes),
        plural(static_cast<uint64_t>(n), "tensor"), held_why(h, in_segment));
  }
}

nlohmann::json held_json(const HeldAtStep& h) {
  if (h.step < 0) return nlohmann::json();
  nlohmann::json j = {{"step", h.step + 1},
                      {"time_us", h.time_us},
                      {"graph_pool", h.graph_pool},
                      {"gradient_bytes", h.bytes(true)},
                      {"outside_segments_bytes", h.bytes(false)},
                      {"tensors", h.tensors.size()}};
  if (h.bytes(true)) j["why"] = held_why(h, true);
  if (h.bytes(false)) j["outside_segments_why"] = held_why(h, false);
  return j;
}

}  // namespace

void print_ledger_text(const Ledger& all, int64_t origin, size_t top, std::ostream& out,
                       uint64_t min_line) {
  const Ledger l = without_small_lines(all, min_line);
  // "3 complete steps (1 more begun, not completed)": a 3-iteration loop reads as 3, the code
  // after its last step (or a step the trace ended inside) as the one begun.
  const size_t begun = l.steps - std::min(l.steps, l.complete_steps);
  out << fmt::format("\nPyTorch ledger (automatic phases: {} complete {}{})\n", l.complete_steps,
                     l.training ? (l.complete_steps == 1 ? "step" : "steps")
                                : (l.complete_steps == 1 ? "iteration" : "iterations"),
                     begun ? fmt::format(" ({} more begun, not completed)", begun) : "");
  for (const auto& d : l.devices) {
    out << fmt::format("  device {}, {} (the first):\n", d.device, step_name(l, d.first_step));
    print_phases(out, d.first, top);
    if (d.steady_step) {
      out << fmt::format("  device {}, {} (the steady state: the last complete one):\n", d.device,
                         step_name(l, *d.steady_step));
      print_phases(out, d.steady, top);
    }
    print_held(out, l, d);
    out << fmt::format("  device {}, at the peaks:\n", d.device);
    print_moment(out, l, d.allocated_peak, origin, top);
    print_moment(out, l, d.reserved_peak, origin, top);
    const auto& g = d.growth;
    if (!g.judged) {
      out << fmt::format("  device {}, growth per step: not judged ({})\n", d.device, g.why);
    } else {
      const std::string counted = g.first_counted == g.last_counted
                                      ? step_name(l, g.first_counted)
                                      : fmt::format("{} .. {}", step_name(l, g.first_counted),
                                                    step_name(l, g.last_counted));
      out << fmt::format(
          "  device {}, growth per step: {} a step (tensors of {} still live at the end of {}, "
          "after a warm-up of {})\n",
          d.device, format_bytes(g.per_step), counted, step_name(l, g.end_step),
          plural(g.warmup, "step"));
      for (size_t i = 0; i < g.by_site.size() && i < top; ++i) {
        const auto& sb = g.by_site[i];
        out << fmt::format("        grows {} a step at {} ({})\n",
                           format_bytes(static_cast<uint64_t>(sb.bytes)), sb.site,
                           category_label(sb.category));
      }
    }
  }
}

nlohmann::json ledger_json(const Ledger& all, size_t top, uint64_t min_line) {
  const Ledger l = without_small_lines(all, min_line);
  nlohmann::json devs = nlohmann::json::array();
  for (const auto& d : l.devices) {
    const auto& g = d.growth;
    nlohmann::json growth = {{"judged", g.judged}};
    if (!g.judged) {
      growth["why"] = g.why;
    } else {
      growth["warmup_steps"] = g.warmup;
      growth["first_counted_step"] = g.first_counted + 1;
      growth["last_counted_step"] = g.last_counted + 1;
      growth["end_step"] = g.end_step + 1;
      growth["live_bytes"] = g.bytes;
      growth["bytes_per_step"] = g.per_step;
      growth["by_site"] = sites_json(g.by_site, top);
    }
    nlohmann::json jd = {
        {"device", d.device},
        {"first_step", {{"step", d.first_step + 1}, {"phases", phases_json(d.first, top)}}},
        {"steady_step", d.steady_step ? nlohmann::json{{"step", *d.steady_step + 1},
                                                       {"phases", phases_json(d.steady, top)}}
                                      : nlohmann::json()},
        {"allocated_peak", moment_json(d.allocated_peak, top)},
        {"reserved_peak", moment_json(d.reserved_peak, top)},
        {"growth", std::move(growth)},
        {"held_outside_blocks", held_json(d.held)}};
    devs.push_back(std::move(jd));
  }
  return {{"training", l.training},
          {"module_depth", l.module_depth ? nlohmann::json(l.module_depth) : nlohmann::json()},
          {"steps", l.steps},
          {"complete_steps", l.complete_steps},
          {"devices", std::move(devs)}};
}

}  // namespace cumemtrace::analysis
