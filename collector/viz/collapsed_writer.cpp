#include "viz/collapsed_writer.h"

#include <map>
#include <sstream>

#include "viz/allocation_site.h"
#include "viz/live_replay.h"

namespace cumemtrace::viz {

namespace {

std::string folded_frame(const snap::Frame& f) {
  std::string label = frame_label(f);
  for (char& c : label)
    if (c == ';' || c == '\n' || c == '\r') c = c == ';' ? ':' : ' ';
  return label;
}

}  // namespace

void write_collapsed(const snap::Snapshot& s, CollapsedMoment when, std::ostream& out) {
  std::vector<std::string> folded(s.stacks.size());
  std::map<std::string, uint64_t> lines;
  for (int device : devices_of(s)) {
    const size_t moment =
        when == CollapsedMoment::kPeak ? find_peak(s, device).entries_applied : SIZE_MAX;
    const std::string root = "cuda:" + std::to_string(device);
    for (const auto& b : live_after(s, device, moment)) {
      if (b.size == 0) continue;
      std::string key = root;
      if (b.stack >= 0 && static_cast<size_t>(b.stack) < s.stacks.size()) {
        std::string& f = folded[b.stack];
        if (f.empty()) {
          const auto frames = visible_frames(s.stacks[b.stack]);
          for (auto it = frames.rbegin(); it != frames.rend(); ++it) f += ";" + folded_frame(**it);
        }
        key += f;
      }
      if (key == root) key += ";<no stack>";
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
