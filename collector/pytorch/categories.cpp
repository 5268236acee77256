#include "pytorch/categories.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "analysis/frames.h"

namespace cumemtrace::analysis {

namespace {

using snap::Action;
using snap::Category;

constexpr size_t kNone = std::numeric_limits<size_t>::max();

Category category_of_role(snap::OwnerRole r) {
  switch (r) {
    case snap::OwnerRole::kParameter:
      return Category::kParameter;
    case snap::OwnerRole::kGradient:
      return Category::kGradient;
    case snap::OwnerRole::kOptimizerState:
      return Category::kOptimizerState;
    case snap::OwnerRole::kInput:
      return Category::kInput;
    case snap::OwnerRole::kParameterUnsharded:
      return Category::kParameterUnsharded;
    case snap::OwnerRole::kCublasWorkspace:
      return Category::kCublasWorkspace;
    case snap::OwnerRole::kCommunication:
      return Category::kCommunication;
    case snap::OwnerRole::kKvCache:
      return Category::kKvCache;
  }
  return Category::kUnknown;
}

// The entry where a tensor stops being alive (contract: its free_requested, else free_completed).
std::ptrdiff_t end_index(const TensorLife& l) {
  return l.free_requested >= 0 ? l.free_requested : l.free_completed;
}

// Pass 1: the tensors and which entries belong to which.
void find_lives(const std::vector<snap::TraceEntry>& tr, bool all_pytorch, DeviceTensors& out) {
  out.life_of.assign(tr.size(), -1);
  std::unordered_map<uint64_t, int32_t> open;
  open.reserve(1024);
  auto start = [&](const snap::TraceEntry& e, std::ptrdiff_t alloc) {
    TensorLife l;
    l.addr = e.addr;
    l.size = snap::held_bytes(e);  // PyTorch's block where known
    l.requested = e.size;
    l.stack = e.stack;
    l.alloc = alloc;
    l.alloc_us = alloc >= 0 ? e.time_us : kTimeMin;
    l.free_us = kTimeMax;
    out.lives.push_back(l);
    return static_cast<int32_t>(out.lives.size() - 1);
  };
  for (size_t i = 0; i < tr.size(); ++i) {
    const auto& e = tr[i];
    if (!all_pytorch && e.source != snap::Source::kPytorch) continue;
    const auto idx = static_cast<std::ptrdiff_t>(i);
    if (e.action == Action::kAlloc) {
      if (auto it = open.find(e.addr); it != open.end()) {
        auto& prev = out.lives[static_cast<size_t>(it->second)];  // re-used without a free
        if (prev.free_us == kTimeMax) prev.free_us = e.time_us;
      }
      const int32_t id = start(e, idx);
      open[e.addr] = id;
      out.life_of[i] = id;
    } else if (e.action == Action::kFreeRequested || e.action == Action::kFreeCompleted) {
      auto it = open.find(e.addr);
      int32_t id;
      if (it == open.end()) {
        id = start(e, -1);  // allocated before the trace
        it = open.emplace(e.addr, id).first;
      } else {
        id = it->second;
      }
      auto& l = out.lives[static_cast<size_t>(id)];
      if (l.free_us == kTimeMax) l.free_us = e.time_us;
      if (e.action == Action::kFreeRequested) {
        l.free_requested = idx;
      } else {
        l.free_completed = idx;
        open.erase(it);
      }
      out.life_of[i] = id;
    }
  }
}

// Pass 2: the ownership walks joined with the tensors alive at their moments; returns each
// tensor's role (0 = none), the lowest role winning.
std::vector<uint8_t> join_walks(const std::vector<snap::TraceEntry>& tr,
                                const std::vector<snap::OwnerWalk>& walks,
                                const DeviceTensors& dt) {
  std::vector<uint8_t> role(dt.lives.size(), 0);
  if (walks.empty() || dt.lives.empty()) return role;
  std::vector<size_t> order(walks.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return walks[a].time_us < walks[b].time_us; });

  std::map<uint64_t, int32_t> live;
  for (size_t k = 0; k < dt.lives.size(); ++k)
    if (dt.lives[k].alloc < 0) live[dt.lives[k].addr] = static_cast<int32_t>(k);
  // Tensors that stopped being alive at `recent_time`: a walk at that very microsecond still
  // saw them (contract: alive until the free time, inclusive).
  std::vector<int32_t> recent;
  int64_t recent_time = kTimeMin;
  auto mark = [&](int32_t id, uint8_t r) {
    auto& cur = role[static_cast<size_t>(id)];
    if (cur == 0 || r < cur) cur = r;
  };
  auto inside = [&](int32_t id, uint64_t p) {
    const auto& l = dt.lives[static_cast<size_t>(id)];
    return p >= l.addr && p - l.addr < l.size;
  };
  auto apply = [&](const snap::OwnerWalk& w) {
    const auto r = static_cast<uint8_t>(w.role);
    for (const auto& [p, bytes] : w.tensors) {
      (void)bytes;
      auto it = live.upper_bound(p);
      if (it != live.begin() && inside(std::prev(it)->second, p)) {
        mark(std::prev(it)->second, r);
        continue;
      }
      if (recent_time != w.time_us) continue;
      for (int32_t id : recent) {
        if (inside(id, p)) {
          mark(id, r);
          break;
        }
      }
    }
  };
  size_t wi = 0;
  for (size_t i = 0; i < tr.size(); ++i) {
    const int64_t t = tr[i].time_us;
    while (wi < order.size() && walks[order[wi]].time_us < t) apply(walks[order[wi++]]);
    const int32_t id = dt.life_of[i];
    if (id < 0) continue;
    const auto& l = dt.lives[static_cast<size_t>(id)];
    const auto idx = static_cast<std::ptrdiff_t>(i);
    if (idx == l.alloc) live[l.addr] = id;
    if (idx == end_index(l)) {
      if (auto it = live.find(l.addr); it != live.end() && it->second == id) live.erase(it);
      if (t != recent_time) {
        recent.clear();
        recent_time = t;
      }
      recent.push_back(id);
    }
  }
  while (wi < order.size()) apply(walks[order[wi++]]);
  return role;
}

// The ownership walks of one role, by time.
std::vector<const snap::OwnerWalk*> walks_by_time(const snap::Snapshot& s, snap::OwnerRole role) {
  std::vector<const snap::OwnerWalk*> out;
  if (s.tool)
    for (const auto& w : s.tool->ownership)
      if (w.role == role) out.push_back(&w);
  std::stable_sort(out.begin(), out.end(),
                   [](const auto* a, const auto* b) { return a->time_us < b->time_us; });
  return out;
}

// The latest of `walks` (by time) made at or before `t`, or null.
const snap::OwnerWalk* latest_walk(const std::vector<const snap::OwnerWalk*>& walks, int64_t t) {
  auto it = std::upper_bound(walks.begin(), walks.end(), t,
                             [](int64_t v, const auto* w) { return v < w->time_us; });
  return it == walks.begin() ? nullptr : *std::prev(it);
}

// Whether `w` holds a data pointer inside the tensor's block.
bool reaches(const snap::OwnerWalk& w, const TensorLife& l) {
  for (const auto& [p, bytes] : w.tensors)
    if (p >= l.addr && p < l.addr + l.size) return true;
  return false;
}

// Whether `stack`'s innermost Python frame is DistributedDataParallel._ddp_init_helper or
// ._pre_forward, or _DDPJoinHook.main_hook (torch/nn/parallel/distributed.py): the frames from
// which DDP's C++ Reducer makes its gradient buckets (contract, rule 1b; checked on torch 2.11 by
// tests/torch_phases/ddp_ranks.py). 3.9/3.10 name frames without their class.
bool made_by_ddp_reducer(const snap::Snapshot& s, int32_t stack) {
  if (stack < 0 || static_cast<size_t>(stack) >= s.stacks.size()) return false;
  for (const auto& f : s.stacks[static_cast<size_t>(stack)]) {
    if (!is_python_frame(f)) continue;
    const std::string_view file = f.filename, name = f.name;
    if (!file.ends_with("torch/nn/parallel/distributed.py")) return false;
    static constexpr std::string_view kCalls[][2] = {
        {"DistributedDataParallel.", "_ddp_init_helper"},
        {"DistributedDataParallel.", "_pre_forward"},
        {"_DDPJoinHook.", "main_hook"}};  // uneven inputs' Join: rebuilds them too
    for (const auto& [cls, fn] : kCalls) {
      if (name == fn ||
          (name.size() == cls.size() + fn.size() && name.starts_with(cls) && name.ends_with(fn))) {
        return true;
      }
    }
    return false;
  }
  return false;
}

}  // namespace

bool labels_categories(const snap::Snapshot& s, const Phases& phases) {
  return phases.automatic() || (s.tool && !s.tool->ownership.empty());
}

DeviceTensors device_tensors(const snap::Snapshot& s, int device, const Phases& phases) {
  DeviceTensors dt;
  if (device < 0 || static_cast<size_t>(device) >= s.device_traces.size()) return dt;
  const auto& tr = s.device_traces[static_cast<size_t>(device)];
  find_lives(tr, !s.tool, dt);
  static const std::vector<snap::OwnerWalk> kNoWalks;
  const auto role = join_walks(tr, s.tool ? s.tool->ownership : kNoWalks, dt);

  // For each span: the next forward in any step (rule 5 without input walks).
  const auto& spans = phases.spans();
  std::vector<size_t> next_forward(spans.size(), kNone);
  for (size_t j = spans.size(); j-- > 1;)
    next_forward[j - 1] = spans[j].phase == Phase::kForward ? j : next_forward[j];

  // A gradient made again where the current gradient walk saw one (rule 3's exception, contract):
  // the walks are sent only when the gradients' pointers moved, so with zero_grad(set_to_none)
  // each step's new gradients usually land where the last walk's were and no new walk comes.
  const auto grad_walks = walks_by_time(s, snap::OwnerRole::kGradient);
  std::vector<size_t> next_optimizer(spans.size(), kNone);
  for (size_t j = spans.size(); j-- > 1;)
    next_optimizer[j - 1] = spans[j].phase == Phase::kOptimizer ? j : next_optimizer[j];
  auto regrown_gradient = [&](const TensorLife& l, size_t span) {
    const size_t o = next_optimizer[span];
    if (o == kNone || l.free_us < spans[o].begin_us) return false;  // not alive into the step
    const auto* w = latest_walk(grad_walks, l.alloc_us);
    if (!w) return false;  // no walk yet: nothing to carry over
    for (const auto& [p, bytes] : w->tensors)
      if (p == l.addr && bytes <= l.size) return true;
    return false;
  };
  // A batch made again where the last input walk saw one (rule 5's carry-over, contract): the
  // input walk is sent only when the root's inputs' pointers changed, so each step's new batch,
  // landing where the last one was, gets no walk of its own.
  const auto input_walks_by_time = walks_by_time(s, snap::OwnerRole::kInput);
  const bool input_walks = !input_walks_by_time.empty();
  auto carried_input = [&](const TensorLife& l, size_t f) {
    if (f == kNone || l.free_us < spans[f].begin_us) return false;  // not alive into it
    const auto* w = latest_walk(input_walks_by_time, spans[f].end_us);
    // A walk sent in that forward is the current one: it was joined with the tensor's life.
    return w && w->time_us < spans[f].begin_us && reaches(*w, l);
  };
  // Whether the latest gradient walk made while `l` lived points into it.
  auto latest_grad_walk_in = [&](const TensorLife& l) {
    const auto* w = latest_walk(grad_walks, l.free_us);
    return w && w->time_us >= l.alloc_us && reaches(*w, l);
  };
  std::unordered_map<int32_t, bool> ddp_stacks;  // made_by_ddp_reducer, once per stack
  for (size_t k = 0; k < dt.lives.size(); ++k) {
    auto& l = dt.lives[k];
    if (role[k] && role[k] != static_cast<uint8_t>(snap::OwnerRole::kInput)) {
      l.category = category_of_role(static_cast<snap::OwnerRole>(role[k]));
      // A DDP bucket the gradients were views of until the buckets were rebuilt, kept alive
      // after (by NCCL's work): the latest gradient walk while it lives is not in it (rule 1b).
      if (l.category == Category::kGradient && !latest_grad_walk_in(l) &&
          made_by_ddp_reducer(s, l.stack))
        l.category = Category::kCommunication;
      continue;
    }
    l.category = Category::kUnknown;
    if (!phases.automatic() || l.alloc < 0) continue;
    const auto w = phases.of(tr[static_cast<size_t>(l.alloc)]);
    const bool freed_within = l.free_us != kTimeMax && phases.span_at(l.free_us) == w.span;
    if (!freed_within) {
      auto [it, fresh] = ddp_stacks.try_emplace(l.stack, false);
      if (fresh) it->second = made_by_ddp_reducer(s, l.stack);
      if (it->second) {
        l.category = Category::kCommunication;
        continue;
      }
    }
    switch (w.phase) {
      case Phase::kForward:
      case Phase::kLoss:
        l.category = freed_within ? Category::kTemporary : Category::kActivation;
        break;
      case Phase::kBackward:
        if (freed_within)
          l.category = Category::kTemporary;
        else if (regrown_gradient(l, w.span))
          l.category = Category::kGradient;
        else
          l.category = Category::kAutograd;
        break;
      case Phase::kOptimizer:
        // Within its step, not only its span: a closure's forward and backward cut
        // optimizer.step(closure) into several optimizer spans (LBFGS keeps its direction and
        // line-search tensors across the closure's evaluations and frees them before it returns).
        if (freed_within || (l.free_us != kTimeMax && phases.step_at(l.free_us) == w.step))
          l.category = Category::kTemporary;
        else if (input_walks && !phases.in_optimizer_step(l.alloc_us))
          l.category = Category::kProgram;  // made before the step ran, kept past it
        break;
      case Phase::kZeroGrad:
        if (freed_within) l.category = Category::kTemporary;
        break;
      case Phase::kSetup:
      case Phase::kData:
      case Phase::kOther: {
        const size_t f = next_forward[w.span];
        const bool walked_input = role[k] == static_cast<uint8_t>(snap::OwnerRole::kInput);
        if (input_walks ? walked_input || carried_input(l, f)
                        : f != kNone && l.free_us >= spans[f].begin_us)
          l.category = Category::kInput;
        else if (freed_within)
          l.category = Category::kTemporary;
        else if (input_walks)
          l.category = Category::kProgram;
        break;
      }
    }
  }
  return dt;
}

uint64_t HeldAtStep::bytes(bool in_segment) const {
  uint64_t sum = 0;
  for (const auto& t : tensors) {
    if (t.in_segment == in_segment)
      sum += (t.bytes + snap::kBlockUnit - 1) / snap::kBlockUnit * snap::kBlockUnit;
  }
  return sum;
}

HeldAtStep held_outside_blocks(const snap::Snapshot& s, int device, const Phases& phases,
                               const DeviceTensors& dt, int step) {
  HeldAtStep out;
  const auto& steps = phases.steps();
  if (!s.tool || !phases.training() || step < 0 || static_cast<size_t>(step) >= steps.size() ||
      !steps[static_cast<size_t>(step)].complete || device < 0 ||
      static_cast<size_t>(device) >= s.device_traces.size()) {
    return out;
  }
  const int64_t mark = steps[static_cast<size_t>(step)].end_us - 1;  // its auto:step MARK
  // The walk of the step's post-hook comes after the MARK, before the next phase begins.
  int64_t limit = kTimeMax;
  const auto& spans = phases.spans();
  for (size_t j = phases.span_at(mark + 1); j < spans.size(); ++j) {
    if (spans[j].begin_us > mark && !gap_phase(spans[j].phase)) {
      limit = spans[j].begin_us;
      break;
    }
  }
  const snap::OwnerWalk* walk = nullptr;
  for (const auto& w : s.tool->ownership) {
    if (w.role == snap::OwnerRole::kGradient && w.time_us < limit &&
        (!walk || w.time_us >= walk->time_us)) {
      walk = &w;
    }
  }
  out.step = step;
  out.time_us = walk ? std::max(mark, walk->time_us) : mark;
  const int64_t t = out.time_us;
  if (s.tool->pytorch) {
    for (const auto& p : s.tool->pytorch->private_pools)
      out.graph_pool |= p.kind == "cuda_graph" && p.time_us <= t;
  }
  if (!walk) return out;
  out.walk_us = walk->time_us;
  // The tensors and PyTorch's segments (cudaMalloc'd or mapped) live at t.
  std::map<uint64_t, uint64_t> live, segments;
  for (const auto& l : dt.lives) {
    if (l.alloc_us <= t && l.free_us >= t) {
      auto& size = live[l.addr];
      size = std::max(size, l.size);
    }
  }
  for (const auto& e : s.device_traces[static_cast<size_t>(device)]) {
    if (e.time_us > t || e.source != snap::Source::kPytorch)
      continue;  // threads' stamps interleave
    if (e.action == Action::kSegmentAlloc || e.action == Action::kSegmentMap) {
      segments[e.addr] = e.size;
    } else if (e.action == Action::kSegmentFree || e.action == Action::kSegmentUnmap) {
      segments.erase(e.addr);
    }
  }
  // What was there before the trace began (a capture that attached late) and is still there at
  // its end: the end state's segments and allocated blocks no trace entry made.
  std::unordered_set<uint64_t> traced;
  for (const auto& e : s.device_traces[static_cast<size_t>(device)]) {
    if (e.source == snap::Source::kPytorch) traced.insert(e.addr);
  }
  for (const auto& g : s.segments) {
    if (g.device != device || g.source != snap::Source::kPytorch) continue;
    if (!traced.count(g.address)) segments.emplace(g.address, g.total_size);
    for (const auto& b : g.blocks) {
      if (b.state.starts_with("active") && !traced.count(b.address))
        live.emplace(b.address, b.size);
    }
  }
  auto inside = [](const std::map<uint64_t, uint64_t>& m, uint64_t p) {
    auto it = m.upper_bound(p);
    return it != m.begin() && p - std::prev(it)->first < std::prev(it)->second;
  };
  // A pointer of another device's memory is in none of this device's segments and blocks: it is
  // that device's to list (each device judges its own), unless no device holds it.
  auto any_device_segment = [&](uint64_t p) {
    for (size_t d = 0; d < s.device_traces.size(); ++d) {
      if (static_cast<int>(d) == device) continue;
      for (const auto& e : s.device_traces[d]) {
        if (e.time_us <= t && e.source == snap::Source::kPytorch &&
            (e.action == Action::kSegmentAlloc || e.action == Action::kSegmentMap) && p >= e.addr &&
            p - e.addr < e.size)
          return true;
      }
    }
    return false;
  };
  for (const auto& [p, bytes] : walk->tensors) {
    if (inside(live, p)) continue;
    const bool in_segment = inside(segments, p);
    if (!in_segment && (device != 0 || any_device_segment(p))) continue;
    out.tensors.push_back({p, bytes, Category::kGradient, in_segment});
  }
  return out;
}

void label_categories(snap::Snapshot& s) {
  const Phases phases(s);
  if (!labels_categories(s, phases)) return;
  for (size_t d = 0; d < s.device_traces.size(); ++d) {
    const auto dt = device_tensors(s, static_cast<int>(d), phases);
    auto& tr = s.device_traces[d];
    for (size_t i = 0; i < tr.size(); ++i) {
      auto& e = tr[i];
      if (s.tool && e.source != snap::Source::kPytorch) {
        e.category = Category::kLibrary;
      } else if (dt.life_of[i] >= 0) {
        e.category = dt.lives[static_cast<size_t>(dt.life_of[i])].category;
      } else {
        e.category = Category::kUnknown;  // segment events, oom, snapshot: no tensor's
      }
    }
  }
}

}  // namespace cumemtrace::analysis
