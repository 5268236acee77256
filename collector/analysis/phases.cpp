#include "analysis/phases.h"

#include <algorithm>
#include <charconv>
#include <limits>

namespace cumemtrace::analysis {

namespace {

bool phase_of_name(std::string_view name, Phase* p) {
  if (name == kAutoForward)
    *p = Phase::kForward;
  else if (name == kAutoBackward)
    *p = Phase::kBackward;
  else if (name == kAutoOptimizer)
    *p = Phase::kOptimizer;
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
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kOptimizer:
      return "optimizer";
    case Phase::kOther:
      break;
  }
  return "other";
}

Phases::Phases(const snap::Snapshot& s) {
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

  // Intervals: the outermost open START is the phase (contract).
  struct Interval {
    Phase phase;
    int64_t begin, end;
    bool ended;
  };
  std::vector<Interval> intervals;
  std::vector<int64_t> step_marks;
  std::vector<Phase> open;
  int64_t current_begin = 0;
  for (const auto* a : marks) {
    Phase p = Phase::kOther;
    if (!phase_of_name(a->name, &p)) {
      if (a->stage == "MARK") step_marks.push_back(a->time_us);
      continue;
    }
    if (a->stage == "START") {
      if (open.empty()) current_begin = a->time_us;
      open.push_back(p);
    } else if (a->stage == "END") {
      auto it = std::find(open.rbegin(), open.rend(), p);
      if (it == open.rend()) continue;  // an END without its START: nothing to close
      const bool outermost = std::next(it) == open.rend();
      open.erase(std::next(it).base());
      if (!outermost) continue;
      const int64_t end = after(a->time_us);
      if (current_begin < end) intervals.push_back({p, current_begin, end, true});
      current_begin = end;  // a still open inner interval becomes the phase from here
    }
  }
  if (!open.empty() && current_begin < kTimeMax)
    intervals.push_back({open.front(), current_begin, kTimeMax, false});

  training_ = !step_marks.empty();
  for (const auto& iv : intervals)
    if (iv.phase != Phase::kForward) training_ = true;

  // Step boundaries: where each step after the first begins.
  std::vector<int64_t> bounds;
  if (training_) {
    for (int64_t m : step_marks) bounds.push_back(after(m));
  } else {
    bool first = true;
    for (const auto& iv : intervals) {
      if (iv.phase != Phase::kForward) continue;
      if (!first) bounds.push_back(iv.begin);
      first = false;
    }
  }
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  int64_t begin = kTimeMin;
  for (int64_t b : bounds) {
    if (b <= begin) continue;
    steps_.push_back({begin, b, true, 0});
    begin = b;
  }
  steps_.push_back({begin, kTimeMax, false, 0});

  // Spans: intervals and the "other" stretches between them, the latter cut at step boundaries.
  auto add_other = [&](int64_t from, int64_t to) {
    while (from < to) {
      const int k = step_at(from);
      const int64_t stop = std::min(to, steps_[static_cast<size_t>(k)].end_us);
      spans_.push_back({Phase::kOther, from, stop, k, -1, true});
      from = stop;
    }
  };
  int64_t cursor = kTimeMin;
  for (const auto& iv : intervals) {
    add_other(cursor, iv.begin);
    spans_.push_back({iv.phase, iv.begin, iv.end, step_at(iv.begin), -1, iv.ended});
    cursor = iv.end;
  }
  add_other(cursor, kTimeMax);  // nothing when the last interval never ended

  for (auto& sp : spans_) {
    auto& st = steps_[static_cast<size_t>(sp.step)];
    if (sp.phase == Phase::kForward) sp.micro = st.micro_steps++;
    if (sp.phase == Phase::kBackward) sp.micro = std::max(st.micro_steps - 1, 0);
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
