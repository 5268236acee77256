#include "analysis/range.h"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

namespace cumemtrace::analysis {

std::optional<RangeWindow> find_range(const snap::Snapshot& s, const std::string& name,
                                      std::string* why) {
  std::vector<const snap::Annotation*> marks;
  for (const auto& a : s.annotations)
    if (a.name == name) marks.push_back(&a);
  std::stable_sort(marks.begin(), marks.end(),
                   [](const auto* a, const auto* b) { return a->time_us < b->time_us; });
  std::vector<int64_t> open;
  RangeWindow w;
  w.name = name;
  size_t starts = 0, ends = 0;
  for (const auto* a : marks) {
    if (a->stage == "START") {
      open.push_back(a->time_us);
      ++starts;
    } else if (a->stage == "END") {
      ++ends;
      if (open.empty()) continue;
      w.start_us = open.back();
      w.end_us = a->time_us;
      open.pop_back();
      ++w.completed;
    }
  }
  if (w.completed) return w;
  if (why) {
    *why = starts ? fmt::format(
                        "range '{}' has a START but no END (the snapshot was written "
                        "inside it?)",
                        name)
           : ends ? fmt::format("range '{}' has an END but no START", name)
                  : fmt::format("no range named '{}' in the snapshot", name);
  }
  return std::nullopt;
}

namespace {

// The window's own allocations while a cursor walks it: added within it, not yet freed.
struct OwnBytes {
  const std::map<uint64_t, int64_t>& at_start;  // units live at START: address -> time
  std::unordered_map<uint64_t, uint64_t> live;  // address -> bytes
  uint64_t bytes = 0;

  bool before(const Allocation& a) const {
    auto it = at_start.find(a.addr);
    return it != at_start.end() && it->second == a.time_us;
  }
  void apply(const UnitChange& ch) {
    auto it = live.find(ch.unit.addr);
    if (it != live.end()) {  // freed, or re-stacked (removed and added again)
      bytes -= it->second;
      live.erase(it);
    }
    if (ch.added && !before(ch.unit)) {
      live[ch.unit.addr] = ch.unit.size;
      bytes += ch.unit.size;
    }
  }
  // One step's changes in a PyTorch user's terms: tensors, not PyTorch's segments.
  void step(const DeviceReplay& r, const DeviceReplay::Cursor& c) {
    for (const auto& ch : c.changes())
      if (!(r.splits_tensors() && ch.unit.pytorch)) apply(ch);
    for (const auto& ch : c.tensor_changes()) apply(ch);
  }
};

std::vector<Allocation> allocated_within(const DeviceReplay::Cursor& c, const OwnBytes& own) {
  std::vector<Allocation> out;
  for (const auto& a : c.attributed().allocations)
    if (!own.before(a)) out.push_back(a);
  return out;
}

}  // namespace

RangeResult evaluate_range(const DeviceReplay& r, const RangeWindow& w) {
  RangeResult out;
  out.device = r.device();
  const auto first = r.index_at_time(w.start_us);
  const auto last = r.index_at_time(w.end_us);
  out.start_bytes = r.bytes_after(first);
  out.end_bytes = r.bytes_after(last);
  out.peak = r.peak_between(w.start_us, w.end_us);
  // Allocated within the window: not live at START (by address and time).
  DeviceReplay::Cursor c(r);
  while (c.index() < first && c.step()) {
  }
  std::map<uint64_t, int64_t> at_start;
  for (const auto& a : c.attributed().allocations) at_start[a.addr] = a.time_us;
  OwnBytes own{at_start, {}, 0};
  out.own = {0, w.start_us, first};
  while (c.index() < last && c.step()) {
    own.step(r, c);
    out.own.raise(own.bytes, r.time_after(c.index()), c.index());
  }
  out.leaked = allocated_within(c, own);
  for (const auto& a : out.leaked) out.leaked_bytes += a.size;
  if (out.own.bytes > 0) {
    DeviceReplay::Cursor at(r);
    while (at.index() < out.own.index && at.step()) {
    }
    out.own_at_peak = allocated_within(at, own);
  }
  return out;
}

Watermark layer_peak(const DeviceReplay& rp, const snap::Snapshot& s, int d, bool driver,
                     bool allocated, const std::optional<RangeWindow>& window) {
  int64_t t0 = std::numeric_limits<int64_t>::min(), t1 = std::numeric_limits<int64_t>::max();
  if (window) t0 = window->start_us, t1 = window->end_us;
  Watermark w;
  if (driver) {
    // The sample in force at t0 counts too: it held when the window opened.
    if (auto v = rp.driver_at(t0)) w = {*v, t0, -1};
    for (const auto& m : s.tool->driver_memory) {
      if (m.device == d && m.time_us >= t0 && m.time_us <= t1) w.raise(m.used_bytes, m.time_us);
    }
  } else {
    const std::ptrdiff_t first = window ? rp.index_at_time(t0) : -1;
    const std::ptrdiff_t last =
        window ? rp.index_at_time(t1) : static_cast<std::ptrdiff_t>(rp.trace().size()) - 1;
    for (std::ptrdiff_t i = first; i <= last; ++i) {
      const uint64_t v = allocated ? rp.allocated_after(i) : rp.reserved_after(i);
      if (i == first)
        w = {v, rp.time_after(i), i};
      else
        w.raise(v, rp.time_after(i), i);
    }
  }
  return w;
}

}  // namespace cumemtrace::analysis
