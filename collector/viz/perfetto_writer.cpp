#include "viz/perfetto_writer.h"

#include <map>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>

#include "analysis/frames.h"
#include "analysis/model.h"
#include "snapshot/utf8.h"

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
    int64_t& cached = leaf_[static_cast<size_t>(stack)];
    if (cached >= 0) return cached;
    const auto frames = analysis::visible_frames(s_.stacks[static_cast<size_t>(stack)]);
    int64_t parent = -1;
    for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
      const std::string label = analysis::format_frame(**it);
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
  const analysis::SiteTable sites(s);
  std::vector<std::string> stack_text(opt.stack_frames ? s.stacks.size() : 0);

  t.raw().append("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":\"cumemtrace\"");
  if (s.tool) {
    t.raw().append(",\"exe\":");
    append_json_string(t.raw(), s.tool->exe);
    fmt::format_to(std::back_inserter(t.raw()), ",\"pid\":{}", s.tool->pid);
  }
  t.raw().append("},\n\"traceEvents\":[");

  auto counter = [&](std::string_view name, int64_t ts, int pid, uint64_t bytes) {
    fmt::format_to(std::back_inserter(t.begin()),
                   "\"ph\":\"C\",\"name\":\"{}\",\"ts\":{},\"pid\":{},\"args\":{{\"bytes\":{}}}",
                   name, ts, pid, bytes);
    t.end();
  };
  const int n = analysis::device_count(s);
  for (int device = 0; device < n; ++device) {
    const analysis::DeviceReplay rp(s, device);
    const auto& tl = rp.timeline();
    const auto& tr = rp.trace();
    bool has_segments = false;
    for (const auto& g : s.segments) has_segments = has_segments || g.device == device;
    if (tr.empty() && !has_segments && !tl.has_driver) continue;
    const int pid = device + 1;
    metadata(t, pid, 0, "process_name", fmt::format("cuda:{}", device));
    metadata(t, pid, kAllocThread, "thread_name", "allocations");
    metadata(t, pid, kMarkThread, "thread_name", "marks");
    const bool allocated_line = tl.has_reserved && rp.flavor() == analysis::Flavor::kCumemtrace;
    // The state before the first entry, so a trace that starts with memory live shows it.
    if (!tr.empty()) {
      const int64_t t0 = tr.front().time_us;
      if (rp.bytes_after(-1)) counter("live", t0, pid, rp.bytes_after(-1));
      if (tl.has_reserved && rp.reserved_after(-1))
        counter("reserved", t0, pid, rp.reserved_after(-1));
      if (allocated_line && rp.allocated_after(-1))
        counter("allocated", t0, pid, rp.allocated_after(-1));
    }
    for (size_t i = 0; i < tr.size(); ++i) {
      const auto& e = tr[i];
      const auto idx = static_cast<std::ptrdiff_t>(i);
      if (analysis::is_request(rp.flavor(), e)) {
        auto& b = t.begin();
        b.append("\"ph\":\"i\",\"s\":\"t\",\"cat\":\"alloc\",\"name\":");
        append_json_string(b, sites.site(e.stack));
        fmt::format_to(
            std::back_inserter(b),
            ",\"ts\":{},\"pid\":{},\"tid\":{},\"args\":{{\"bytes\":{},\"addr\":\"0x{:x}\"",
            e.time_us, pid, kAllocThread, e.size, e.addr);
        if (e.stack >= 0 && static_cast<size_t>(e.stack) < stack_text.size()) {
          std::string& text = stack_text[static_cast<size_t>(e.stack)];
          if (text.empty()) {
            const auto visible = analysis::visible_frames(s.stacks[static_cast<size_t>(e.stack)]);
            for (size_t k = 0; k < visible.size() && k < opt.stack_frames; ++k) {
              if (k) text.push_back('\n');
              text += analysis::format_frame(*visible[k]);
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
      if (rp.bytes_after(idx) != rp.bytes_after(idx - 1))
        counter("live", e.time_us, pid, rp.bytes_after(idx));
      if (tl.has_reserved && rp.reserved_after(idx) != rp.reserved_after(idx - 1))
        counter("reserved", e.time_us, pid, rp.reserved_after(idx));
      if (allocated_line && rp.allocated_after(idx) != rp.allocated_after(idx - 1))
        counter("allocated", e.time_us, pid, rp.allocated_after(idx));
    }
    if (s.tool) {
      for (const auto& m : s.tool->driver_memory)
        if (m.device == device) counter("driver-visible", m.time_us, pid, m.used_bytes);
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
