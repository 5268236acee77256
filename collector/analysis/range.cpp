#include "analysis/range.h"

#include <algorithm>
#include <map>

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

RangeResult evaluate_range(const DeviceReplay& r, const RangeWindow& w) {
  RangeResult out;
  out.device = r.device();
  const auto first = r.index_at_time(w.start_us);
  const auto last = r.index_at_time(w.end_us);
  out.start_bytes = r.bytes_after(first);
  out.end_bytes = r.bytes_after(last);
  const auto p = r.peak_between(w.start_us, w.end_us);
  out.peak_bytes = p.bytes;
  out.peak_time_us = p.time_us;
  out.peak_index = p.index;
  // Allocated within the window: not live at START (by address and time), live at END.
  std::map<uint64_t, int64_t> at_start;
  for (const auto& a : r.live_after(first)) at_start[a.addr] = a.time_us;
  for (const auto& a : r.live_after(last)) {
    auto it = at_start.find(a.addr);
    if (it != at_start.end() && it->second == a.time_us) continue;
    out.leaked_bytes += a.size;
    out.leaked.push_back(a);
  }
  return out;
}

}  // namespace cumemtrace::analysis
