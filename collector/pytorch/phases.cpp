#include "pytorch/phases.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <limits>

namespace cumemtrace::analysis {

namespace {

bool phase_of_name(std::string_view name, Phase* p) {
  if (name == kAutoForward)
    *p = Phase::kForward;
  else if (name == kAutoLoss)
    *p = Phase::kLoss;
  else if (name == kAutoBackward)
    *p = Phase::kBackward;
  else if (name == kAutoOptimizer)
    *p = Phase::kOptimizer;
  else if (name == kAutoZeroGrad)
    *p = Phase::kZeroGrad;
  else
    return false;
  return true;
}

// One past `t` without overflowing: where an interval that ends at `t` (inclusive) stops.
int64_t after(int64_t t) {
  return t == kTimeMax ? kTimeMax : t + 1;
}

}  // namespace

std::string_view phase_name(Phase p) {
  switch (p) {
    case Phase::kSetup:
      return "setup";
    case Phase::kData:
      return "data";
    case Phase::kForward:
      return "forward";
    case Phase::kLoss:
      return "loss";
    case Phase::kBackward:
      return "backward";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kZeroGrad:
      return "zero_grad";
    case Phase::kOther:
      break;
  }
  return "other";
}

bool gap_phase(Phase p) {
  return p == Phase::kOther || p == Phase::kSetup || p == Phase::kData;
}

namespace {
std::atomic<uint64_t> phases_built{0};
}  // namespace

uint64_t Phases::built() {
  return phases_built.load(std::memory_order_relaxed);
}

Phases::Phases(const snap::Snapshot& s) {
  phases_built.fetch_add(1, std::memory_order_relaxed);
  if (s.tool) {
    for (const auto& [tid, name] : s.tool->threads) {
      if (name.rfind(kAutogradThreadPrefix, 0) != 0) continue;
      uint32_t v = 0;
      const auto r = std::from_chars(tid.data(), tid.data() + tid.size(), v);
      if (r.ec == std::errc() && r.ptr == tid.data() + tid.size()) autograd_tids_.insert(v);
    }
  }

  std::vector<const snap::Annotation*> marks;
  for (const auto& a : s.annotations) {
    Phase p;
    if (phase_of_name(a.name, &p) || a.name == kAutoStep) marks.push_back(&a);
  }
  std::stable_sort(marks.begin(), marks.end(),
                   [](const auto* a, const auto* b) { return a->time_us < b->time_us; });
  automatic_ = !marks.empty();
  if (!automatic_) {
    steps_.push_back({kTimeMin, kTimeMax, false, 0});
    spans_.push_back({Phase::kOther, kTimeMin, kTimeMax, 0, -1, true});
    return;
  }

  // Segments: stretches of one stack state (contract: the innermost open interval, backward
  // when any open one is). kOther: outside every interval, named below.
  struct Segment {
    Phase phase;
    int64_t begin, end;
    bool ended;
  };
  std::vector<Segment> segments;
  std::vector<int64_t> step_marks, outer_forwards;
  std::vector<Phase> open;
  int64_t cursor = kTimeMin;
  auto state = [&] {
    if (open.empty()) return Phase::kOther;
    if (std::find(open.begin(), open.end(), Phase::kBackward) != open.end())
      return Phase::kBackward;
    return open.back();
  };
  auto close_at = [&](int64_t t) {
    if (cursor < t) segments.push_back({state(), cursor, t, true});
    cursor = std::max(cursor, t);
  };
  for (const auto* a : marks) {
    Phase p = Phase::kOther;
    if (!phase_of_name(a->name, &p)) {
      if (a->stage == "MARK") step_marks.push_back(a->time_us);
      continue;
    }
    // A stretch ends where the state changes, or where an outermost interval begins or ends
    // (two calls one after the other are two spans); an interval nested in backward changes
    // nothing.
    const Phase before = state();
    if (a->stage == "START") {
      const Phase inside = before == Phase::kBackward ? before : p;
      if (open.empty() || inside != before) close_at(a->time_us);
      if (open.empty() && p == Phase::kForward) outer_forwards.push_back(a->time_us);
      if (p == Phase::kOptimizer && std::find(open.begin(), open.end(), p) == open.end())
        optimizer_steps_.push_back({a->time_us, kTimeMax});
      open.push_back(p);
    } else if (a->stage == "END") {
      auto it = std::find(open.rbegin(), open.rend(), p);
      if (it == open.rend()) continue;  // an END without its START: nothing to close
      std::vector<Phase> rest = open;
      rest.erase(rest.begin() + (std::next(it).base() - open.begin()));
      const bool changes =
          rest.empty() || (std::find(rest.begin(), rest.end(), Phase::kBackward) != rest.end()
                               ? Phase::kBackward
                               : rest.back()) != before;
      if (changes) close_at(after(a->time_us));
      if (p == Phase::kOptimizer && std::find(rest.begin(), rest.end(), p) == rest.end())
        optimizer_steps_.back().second = a->time_us;
      open = std::move(rest);
    }
  }
  if (cursor < kTimeMax) segments.push_back({state(), cursor, kTimeMax, open.empty()});

  training_ = !step_marks.empty();
  for (const auto& sg : segments)
    if (sg.phase == Phase::kBackward || sg.phase == Phase::kOptimizer) training_ = true;

  // Step boundaries: where each step after the first begins.
  std::vector<int64_t> bounds;
  if (training_) {
    for (int64_t m : step_marks) bounds.push_back(after(m));
  } else if (outer_forwards.size() > 1) {
    bounds.assign(outer_forwards.begin() + 1, outer_forwards.end());
  }
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  int64_t begin = kTimeMin;
  for (int64_t b : bounds) {
    if (b <= begin) continue;
    steps_.push_back({begin, b, true, 0});
    begin = b;
  }
  steps_.push_back({begin, kTimeMax, false, 0});

  // Spans: the segments cut at step boundaries; `inner` marks the parts of an interval that lie
  // between the intervals nested in it (named like the stretches outside).
  struct Cut {
    PhaseSpan span;
    bool outside;
  };
  std::vector<Cut> cuts;
  for (const auto& sg : segments) {
    int64_t from = sg.begin;
    while (from < sg.end) {
      const int k = step_at(from);
      const int64_t stop = std::min(sg.end, steps_[static_cast<size_t>(k)].end_us);
      cuts.push_back(
          {{sg.phase, from, stop, k, -1, sg.ended || stop < sg.end}, sg.phase == Phase::kOther});
      from = stop;
    }
  }
  // Names of the stretches (contract).
  bool any_interval = false;
  for (size_t i = 0; i < cuts.size(); ++i) {
    auto& c = cuts[i];
    const PhaseSpan* prev =
        i > 0 && cuts[i - 1].span.step == c.span.step ? &cuts[i - 1].span : nullptr;
    const PhaseSpan* next =
        i + 1 < cuts.size() && cuts[i + 1].span.step == c.span.step ? &cuts[i + 1].span : nullptr;
    const bool after_forward =
        training_ && prev && (prev->phase == Phase::kForward || prev->phase == Phase::kLoss);
    if (c.outside) {
      if (!any_interval)
        c.span.phase = Phase::kSetup;
      else if (after_forward && next)
        c.span.phase = Phase::kLoss;
      else if (prev && prev->phase == Phase::kBackward && next && next->phase == Phase::kOptimizer)
        c.span.phase = Phase::kOptimizer;
      else
        c.span.phase = Phase::kData;
    } else {
      any_interval = true;
      if (c.span.phase == Phase::kOptimizer && after_forward) c.span.phase = Phase::kLoss;
    }
  }
  for (const auto& c : cuts) {
    const auto& sp = c.span;
    if (!spans_.empty()) {
      auto& last = spans_.back();
      if (last.step == sp.step && last.phase == sp.phase && sp.phase != Phase::kForward &&
          sp.phase != Phase::kBackward) {
        last.end_us = sp.end_us;  // one span (contract)
        last.ended = sp.ended;
        continue;
      }
    }
    spans_.push_back(sp);
  }

  // Micro-steps (contract).
  int step = -1;
  bool backward_since = true;
  for (auto& sp : spans_) {
    auto& st = steps_[static_cast<size_t>(sp.step)];
    if (sp.step != step) step = sp.step, backward_since = true;
    if (sp.phase == Phase::kForward) {
      if (backward_since) ++st.micro_steps, backward_since = false;
      sp.micro = st.micro_steps - 1;
    } else if (sp.phase == Phase::kLoss || sp.phase == Phase::kBackward) {
      sp.micro = std::max(st.micro_steps - 1, 0);
      if (sp.phase == Phase::kBackward) backward_since = true;
    }
  }
}

size_t Phases::complete_steps() const {
  size_t n = 0;
  for (const auto& st : steps_) n += st.complete ? 1 : 0;
  return n;
}

size_t Phases::span_at(int64_t time_us) const {
  auto it = std::upper_bound(spans_.begin(), spans_.end(), time_us,
                             [](int64_t t, const PhaseSpan& sp) { return t < sp.begin_us; });
  return it == spans_.begin() ? 0 : static_cast<size_t>(it - spans_.begin()) - 1;
}

bool Phases::in_optimizer_step(int64_t time_us) const {
  auto it = std::upper_bound(optimizer_steps_.begin(), optimizer_steps_.end(), time_us,
                             [](int64_t t, const auto& r) { return t < r.first; });
  return it != optimizer_steps_.begin() && time_us <= std::prev(it)->second;
}

int Phases::step_at(int64_t time_us) const {
  auto it = std::upper_bound(steps_.begin(), steps_.end(), time_us,
                             [](int64_t t, const StepSpan& st) { return t < st.begin_us; });
  return it == steps_.begin() ? 0 : static_cast<int>(it - steps_.begin()) - 1;
}

Phases::Where Phases::of(const snap::TraceEntry& e) const {
  Where w;
  w.span = span_at(e.time_us);
  const auto& sp = spans_[w.span];
  w.phase = autograd_thread(e.tid) ? Phase::kBackward : sp.phase;
  w.step = sp.step;
  return w;
}

}  // namespace cumemtrace::analysis
