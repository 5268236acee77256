#include "viz/perfetto_writer.h"

#include <map>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>

#include "viz/allocation_site.h"
#include "viz/live_replay.h"
#include "viz/utf8.h"

namespace cumemtrace::viz {

namespace {

constexpr int kAllocThread = 1;
constexpr int kMarkThread = 2;

class TraceOut {
 public:
  explicit TraceOut(std::ostream& out) : out_(out) {}

  // Starts one event object; the caller appends its remaining fields and closes it with end().
  std::string& begin() {
    if (!first_) buf_.push_back(',');
    first_ = false;
    buf_.append("\n{");
    return buf_;
  }
  void end() {
    buf_.push_back('}');
    if (buf_.size() >= (1u << 20)) flush();
  }
  std::string& raw() { return buf_; }
  void flush() {
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }

 private:
  std::ostream& out_;
  std::string buf_;
  bool first_ = true;
};

// The "stackFrames" tree: one node per (parent, frame label), outermost frame at the root.
class StackFrames {
 public:
  explicit StackFrames(const snap::Snapshot& s) : s_(s), leaf_(s.stacks.size(), -1) {}

  // Node id of the innermost visible frame of `stack`, -1 for no stack.
  int64_t leaf(int32_t stack) {
    if (stack < 0 || static_cast<size_t>(stack) >= s_.stacks.size()) return -1;
    int64_t& cached = leaf_[stack];
    if (cached >= 0) return cached;
    const auto frames = visible_frames(s_.stacks[stack]);
    int64_t parent = -1;
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
      const std::string label = frame_label(**it);
      auto [pos, inserted] =
          index_.try_emplace({parent, label}, static_cast<int64_t>(nodes_.size()));
      if (inserted) nodes_.push_back({parent, label});
      parent = pos->second;
    }
    cached = parent;
    return parent;
  }

  void write(std::string& out) const {
    out.append("\"stackFrames\":{");
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (i) out.push_back(',');
      fmt::format_to(std::back_inserter(out), "\n\"{}\":{{\"category\":\"cuda\",\"name\":", i);
      append_json_string(out, nodes_[i].second);
      if (nodes_[i].first >= 0)
        fmt::format_to(std::back_inserter(out), ",\"parent\":\"{}\"", nodes_[i].first);
      out.push_back('}');
    }
    out.append("}");
  }

 private:
  const snap::Snapshot& s_;
  std::vector<int64_t> leaf_;
  std::vector<std::pair<int64_t, std::string>> nodes_;
  std::map<std::pair<int64_t, std::string>, int64_t> index_;
};

void metadata(TraceOut& t, int pid, int tid, std::string_view what, std::string_view name) {
  auto& b = t.begin();
  b.append("\"ph\":\"M\",\"name\":");
  append_json_string(b, what);
  fmt::format_to(std::back_inserter(b), ",\"pid\":{},\"tid\":{},\"args\":{{\"name\":", pid, tid);
  append_json_string(b, name);
  b.push_back('}');
  t.end();
}

void marks(TraceOut& t, const snap::Snapshot& s, int device, int pid, int64_t end_us) {
  std::unordered_map<std::string, std::vector<int64_t>> open;
  auto slice = [&](const std::string& name, int64_t start, int64_t stop) {
    auto& b = t.begin();
    b.append("\"ph\":\"X\",\"cat\":\"mark\",\"name\":");
    append_json_string(b, name);
    fmt::format_to(std::back_inserter(b), ",\"ts\":{},\"dur\":{},\"pid\":{},\"tid\":{}", start,
                   std::max<int64_t>(0, stop - start), pid, kMarkThread);
    t.end();
  };
  for (const auto& a : s.annotations) {
    if (a.device != device) continue;
    if (a.stage == "START") {
      open[a.name].push_back(a.time_us);
    } else if (a.stage == "END") {
      auto it = open.find(a.name);
      if (it == open.end() || it->second.empty()) continue;
      slice(a.name, it->second.back(), a.time_us);
      it->second.pop_back();
    } else {
      auto& b = t.begin();
      b.append("\"ph\":\"i\",\"s\":\"t\",\"cat\":\"mark\",\"name\":");
      append_json_string(b, a.name);
      fmt::format_to(std::back_inserter(b), ",\"ts\":{},\"pid\":{},\"tid\":{}", a.time_us, pid,
                     kMarkThread);
      t.end();
    }
  }
  for (const auto& [name, starts] : open)
    for (int64_t start : starts) slice(name, start, std::max(start, end_us));
}

}  // namespace

void write_perfetto(const snap::Snapshot& s, std::ostream& out, const PerfettoOptions& opt) {
  TraceOut t(out);
  StackFrames frames(s);
  std::vector<std::string> site_names(s.stacks.size());
  const std::string no_stack = site_label(s, snap::kNoStack);
  auto site_name = [&](int32_t stack) -> const std::string& {
    if (stack < 0 || static_cast<size_t>(stack) >= s.stacks.size()) return no_stack;
    if (site_names[stack].empty()) site_names[stack] = site_label(s, stack);
    return site_names[stack];
  };
  static const std::vector<snap::TraceEntry> kNoTrace;
  std::vector<std::string> stack_text(opt.stack_frames ? s.stacks.size() : 0);

  t.raw().append("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":\"cumemtrace\"");
  if (s.tool) {
    t.raw().append(",\"exe\":");
    append_json_string(t.raw(), s.tool->exe);
    fmt::format_to(std::back_inserter(t.raw()), ",\"pid\":{}", s.tool->pid);
  }
  t.raw().append("},\n\"traceEvents\":[");

  for (int device : devices_of(s)) {
    const int pid = device + 1;
    metadata(t, pid, 0, "process_name", fmt::format("cuda:{}", device));
    metadata(t, pid, kAllocThread, "thread_name", "allocations");
    metadata(t, pid, kMarkThread, "thread_name", "marks");
    const auto& tr =
        static_cast<size_t>(device) < s.device_traces.size() ? s.device_traces[device] : kNoTrace;
    LiveTracker live(preexisting_blocks(s, device));
    bool any_segments = false;
    for (const auto& e : tr) {
      const uint64_t before_live = live.live_bytes();
      const uint64_t before_reserved = live.reserved_bytes();
      live.apply(e);
      if (e.action == snap::Action::kAlloc) {
        auto& b = t.begin();
        b.append("\"ph\":\"i\",\"s\":\"t\",\"cat\":\"alloc\",\"name\":");
        append_json_string(b, site_name(e.stack));
        fmt::format_to(
            std::back_inserter(b),
            ",\"ts\":{},\"pid\":{},\"tid\":{},\"args\":{{\"bytes\":{},\"addr\":\"0x{:x}\"",
            e.time_us, pid, kAllocThread, e.size, e.addr);
        if (e.stack >= 0 && static_cast<size_t>(e.stack) < stack_text.size()) {
          std::string& text = stack_text[e.stack];
          if (text.empty()) {
            const auto visible = visible_frames(s.stacks[e.stack]);
            for (size_t i = 0; i < visible.size() && i < opt.stack_frames; ++i) {
              if (i) text.push_back('\n');
              text += frame_label(*visible[i]);
            }
            if (visible.size() > opt.stack_frames)
              text += "\n(" + std::to_string(visible.size() - opt.stack_frames) + " more)";
          }
          b.append(",\"stack\":");
          append_json_string(b, text);
        }
        b.push_back('}');
        if (const int64_t sf = frames.leaf(e.stack); sf >= 0)
          fmt::format_to(std::back_inserter(b), ",\"sf\":\"{}\"", sf);
        t.end();
      } else if (e.action == snap::Action::kOom) {
        auto& b = t.begin();
        fmt::format_to(std::back_inserter(b),
                       "\"ph\":\"i\",\"s\":\"g\",\"cat\":\"oom\",\"name\":\"OOM\",\"ts\":{},"
                       "\"pid\":{},\"tid\":{},\"args\":{{\"requested\":{},\"device_free\":{}}}",
                       e.time_us, pid, kAllocThread, e.size, e.device_free);
        if (const int64_t sf = frames.leaf(e.stack); sf >= 0)
          fmt::format_to(std::back_inserter(b), ",\"sf\":\"{}\"", sf);
        t.end();
      }
      if (live.live_bytes() != before_live) {
        fmt::format_to(
            std::back_inserter(t.begin()),
            "\"ph\":\"C\",\"name\":\"live\",\"ts\":{},\"pid\":{},\"args\":{{\"bytes\":{}}}",
            e.time_us, pid, live.live_bytes());
        t.end();
      }
      if (live.reserved_bytes() != before_reserved || (!any_segments && live.reserved_bytes())) {
        any_segments = true;
        fmt::format_to(
            std::back_inserter(t.begin()),
            "\"ph\":\"C\",\"name\":\"reserved\",\"ts\":{},\"pid\":{},\"args\":{{\"bytes\":{}}}",
            e.time_us, pid, live.reserved_bytes());
        t.end();
      }
    }
    marks(t, s, device, pid, tr.empty() ? 0 : tr.back().time_us);
  }
  t.raw().append("],\n");
  frames.write(t.raw());
  t.raw().append("}\n");
  t.flush();
}

std::string to_perfetto(const snap::Snapshot& s, const PerfettoOptions& opt) {
  std::ostringstream out;
  write_perfetto(s, out, opt);
  return std::move(out).str();
}

}  // namespace cumemtrace::viz
