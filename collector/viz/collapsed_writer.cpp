#include "viz/collapsed_writer.h"

#include <map>
#include <sstream>

#include "analysis/frames.h"
#include "analysis/model.h"

namespace cumemtrace::viz {

namespace {

std::string folded_frame(const snap::Frame& f) {
  std::string label = analysis::format_frame(f);
  for (char& c : label)
    if (c == ';' || c == '\n' || c == '\r') c = c == ';' ? ':' : ' ';
  return label;
}

}  // namespace

void write_collapsed(const snap::Snapshot& s, CollapsedMoment when, std::ostream& out) {
  std::vector<std::string> folded(s.stacks.size());
  std::map<std::string, uint64_t> lines;
  const auto held = when == CollapsedMoment::kExit ? analysis::live_at_exit(s)
                                                   : std::vector<analysis::Allocation>{};
  const int n = analysis::device_count(s);
  for (int device = 0; device < n; ++device) {
    std::vector<analysis::Allocation> live;
    if (when == CollapsedMoment::kPeak) {
      const analysis::DeviceReplay rp(s, device);
      // PyTorch's memory by its tensors, its cache a root of its own (model.h Attributed), so
      // the peak's lines still add up to the peak.
      auto at_peak = rp.attributed_after(rp.timeline().trace.index);
      live = std::move(at_peak.allocations);
      if (at_peak.cached_free)
        lines["cuda:" + std::to_string(device) + ";<" + analysis::kCachedFreeLabel + ">"] +=
            at_peak.cached_free;
    } else {
      for (const auto& a : held)
        if (a.device == device) live.push_back(a);
    }
    const std::string root = "cuda:" + std::to_string(device);
    for (const auto& b : live) {
      if (b.size == 0) continue;
      std::string key = root;
      if (b.stack >= 0 && static_cast<size_t>(b.stack) < s.stacks.size()) {
        std::string& f = folded[static_cast<size_t>(b.stack)];
        if (f.empty()) {
          const auto frames = analysis::visible_frames(s.stacks[static_cast<size_t>(b.stack)]);
          // Appended in two steps: GCC 12 at -O3 (Release) warns a false -Wrestrict on
          // ";" + std::string&&.
          for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
            f += ';';
            f += folded_frame(**it);
          }
        }
        key += f;
      }
      if (key == root) key += b.before_trace ? ";<before the trace>" : ";<no stack>";
      lines[key] += b.size;
    }
  }
  for (const auto& [stack, bytes] : lines) out << stack << ' ' << bytes << '\n';
}

std::string to_collapsed(const snap::Snapshot& s, CollapsedMoment when) {
  std::ostringstream out;
  write_collapsed(s, when, out);
  return std::move(out).str();
}

}  // namespace cumemtrace::viz
