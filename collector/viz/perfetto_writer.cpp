#include "viz/perfetto_writer.h"

#include <map>
#include <sstream>
#include <unordered_map>

#include <fmt/format.h>

#include "analysis/frames.h"
#include "analysis/model.h"
#include "analysis/rank_identity.h"
#include "snapshot/utf8.h"

namespace cumemtrace::viz {

namespace {

constexpr int kAllocThread = 1;
constexpr int kMarkThread = 2;
constexpr int kPidsPerRank = 1000;  // more than any host's devices

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
      snap::append_json_string(out, nodes_[i].second);
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
  snap::append_json_string(b, what);
  fmt::format_to(std::back_inserter(b), ",\"pid\":{},\"tid\":{},\"args\":{{\"name\":", pid, tid);
  snap::append_json_string(b, name);
  b.push_back('}');
  t.end();
}

// process_sort_index: the order of the track groups (Chrome's viewer; Perfetto keeps its own).
void metadata(TraceOut& t, int pid, int tid, std::string_view what, int sort_index) {
  auto& b = t.begin();
  b.append("\"ph\":\"M\",\"name\":");
  snap::append_json_string(b, what);
  fmt::format_to(std::back_inserter(b), ",\"pid\":{},\"tid\":{},\"args\":{{\"sort_index\":{}}}",
                 pid, tid, sort_index);
  t.end();
}

// A rank's devices get pids of their own, the same in every rank's file and on every host (a
// process id is not: hosts reuse them), so that files merged into one trace never share a pid.
// Perfetto's importer takes pids as 32-bit unsigned integers.
int rank_pid(int rank, int device) {
  return (rank + 1) * kPidsPerRank + device + 1;
}

void marks(TraceOut& t, const snap::Snapshot& s, int device, int pid, int64_t end_us) {
  std::unordered_map<std::string, std::vector<int64_t>> open;
  auto slice = [&](const std::string& name, int64_t start, int64_t stop) {
    auto& b = t.begin();
    b.append("\"ph\":\"X\",\"cat\":\"mark\",\"name\":");
    snap::append_json_string(b, name);
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
      snap::append_json_string(b, a.name);
      fmt::format_to(std::back_inserter(b), ",\"ts\":{},\"pid\":{},\"tid\":{}", a.time_us, pid,
                     kMarkThread);
      t.end();
    }
  }
  for (const auto& [name, starts] : open)
    for (int64_t start : starts) slice(name, start, std::max(start, end_us));
}

void counter(TraceOut& t, std::string_view name, int64_t ts, int pid, uint64_t bytes) {
  fmt::format_to(std::back_inserter(t.begin()),
                 "\"ph\":\"C\",\"name\":\"{}\",\"ts\":{},\"pid\":{},\"args\":{{\"bytes\":{}}}",
                 name, ts, pid, bytes);
  t.end();
}

// The trace's opening: what ran, and its rank where it was one of a job.
void write_header(TraceOut& t, const snap::Snapshot& s) {
  t.raw().append("{\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":\"cumemtrace\"");
  if (s.tool) {
    t.raw().append(",\"exe\":");
    snap::append_json_string(t.raw(), s.tool->exe);
    fmt::format_to(std::back_inserter(t.raw()), ",\"pid\":{}", s.tool->pid);
    if (const auto id = analysis::rank_identity(s); id.known()) {
      fmt::format_to(std::back_inserter(t.raw()), ",\"rank\":{},\"host\":", id.rank);
      snap::append_json_string(t.raw(), id.host);
    }
  }
  t.raw().append("},\n\"traceEvents\":[");
}

// A device with entries, segments or NVML samples gets a track group.
bool device_shown(const snap::Snapshot& s, int device) {
  const auto d = static_cast<size_t>(device);
  if (d < s.device_traces.size() && !s.device_traces[d].empty()) return true;
  for (const auto& g : s.segments)
    if (g.device == device) return true;
  if (s.tool)
    for (const auto& m : s.tool->driver_memory)
      if (m.device == device) return true;
  return false;
}

// The track group of a device and its two threads; returns its pid.
int write_device_tracks(TraceOut& t, const analysis::RankIdentity& id, int device,
                        int devices_shown) {
  const int pid = id.known() ? rank_pid(id.rank, device) : device + 1;
  std::string name = fmt::format("cuda:{}", device);
  if (id.known()) {
    // One track group per rank, named as a user names it; its device too where it used several.
    name = fmt::format("rank {}", id.rank);
    if (!id.host.empty()) name += " @ " + id.host;
    if (devices_shown > 1) name += fmt::format(" cuda:{}", device);
    metadata(t, pid, 0, "process_sort_index", pid);
  }
  metadata(t, pid, 0, "process_name", name);
  metadata(t, pid, kAllocThread, "thread_name", "allocations");
  metadata(t, pid, kMarkThread, "thread_name", "marks");
  return pid;
}

// What the devices' events share: the stack tree, the site names and the innermost frames of
// each stack written into the args (each stack's formatted once, on first use).
class DeviceEvents {
 public:
  DeviceEvents(TraceOut& t, const snap::Snapshot& s, const PerfettoOptions& opt)
      : t_(t),
        s_(s),
        opt_(opt),
        frames_(s),
        sites_(s),
        stack_text_(opt.stack_frames ? s.stacks.size() : 0) {}

  // The device's requests and OOMs as instants, its layers as counters where they change.
  void write(const analysis::DeviceReplay& rp, int pid) {
    const auto& tl = rp.timeline();
    const auto& tr = rp.trace();
    const bool allocated_line = tl.has_reserved && rp.flavor() == analysis::Flavor::kCumemtrace;
    // The state before the first entry, so a trace that starts with memory live shows it.
    if (!tr.empty()) {
      const int64_t t0 = tr.front().time_us;
      if (rp.bytes_after(-1)) counter(t_, "live", t0, pid, rp.bytes_after(-1));
      if (tl.has_reserved && rp.reserved_after(-1))
        counter(t_, "reserved", t0, pid, rp.reserved_after(-1));
      if (allocated_line && rp.allocated_after(-1))
        counter(t_, "allocated", t0, pid, rp.allocated_after(-1));
    }
    for (size_t i = 0; i < tr.size(); ++i) {
      const auto& e = tr[i];
      const auto idx = static_cast<std::ptrdiff_t>(i);
      if (analysis::is_request(rp.flavor(), e)) {
        request(e, pid);
      } else if (e.action == snap::Action::kOom) {
        oom(e, pid);
      }
      if (rp.bytes_after(idx) != rp.bytes_after(idx - 1))
        counter(t_, "live", e.time_us, pid, rp.bytes_after(idx));
      if (tl.has_reserved && rp.reserved_after(idx) != rp.reserved_after(idx - 1))
        counter(t_, "reserved", e.time_us, pid, rp.reserved_after(idx));
      if (allocated_line && rp.allocated_after(idx) != rp.allocated_after(idx - 1))
        counter(t_, "allocated", e.time_us, pid, rp.allocated_after(idx));
    }
  }

  void write_frames() const { frames_.write(t_.raw()); }

 private:
  void request(const snap::TraceEntry& e, int pid) {
    auto& b = t_.begin();
    b.append("\"ph\":\"i\",\"s\":\"t\",\"cat\":\"alloc\",\"name\":");
    snap::append_json_string(b, sites_.site(e.stack));
    fmt::format_to(std::back_inserter(b),
                   ",\"ts\":{},\"pid\":{},\"tid\":{},\"args\":{{\"bytes\":{},\"addr\":\"0x{:x}\"",
                   e.time_us, pid, kAllocThread, e.size, e.addr);
    if (e.stack >= 0 && static_cast<size_t>(e.stack) < stack_text_.size()) {
      b.append(",\"stack\":");
      snap::append_json_string(b, stack_text(e.stack));
    }
    b.push_back('}');
    if (const int64_t sf = frames_.leaf(e.stack); sf >= 0)
      fmt::format_to(std::back_inserter(b), ",\"sf\":\"{}\"", sf);
    t_.end();
  }

  void oom(const snap::TraceEntry& e, int pid) {
    auto& b = t_.begin();
    fmt::format_to(std::back_inserter(b),
                   "\"ph\":\"i\",\"s\":\"g\",\"cat\":\"oom\",\"name\":\"OOM\",\"ts\":{},"
                   "\"pid\":{},\"tid\":{},\"args\":{{\"requested\":{},\"device_free\":{}}}",
                   e.time_us, pid, kAllocThread, e.size, e.device_free);
    if (const int64_t sf = frames_.leaf(e.stack); sf >= 0)
      fmt::format_to(std::back_inserter(b), ",\"sf\":\"{}\"", sf);
    t_.end();
  }

  const std::string& stack_text(int32_t stack) {
    std::string& text = stack_text_[static_cast<size_t>(stack)];
    if (text.empty()) {
      const auto visible = analysis::visible_frames(s_.stacks[static_cast<size_t>(stack)]);
      for (size_t k = 0; k < visible.size() && k < opt_.stack_frames; ++k) {
        if (k) text.push_back('\n');
        text += analysis::format_frame(*visible[k]);
      }
      if (visible.size() > opt_.stack_frames)
        text += "\n(" + std::to_string(visible.size() - opt_.stack_frames) + " more)";
    }
    return text;
  }

  TraceOut& t_;
  const snap::Snapshot& s_;
  const PerfettoOptions& opt_;
  StackFrames frames_;
  const analysis::SiteTable sites_;
  std::vector<std::string> stack_text_;
};

}  // namespace

void write_perfetto(const snap::Snapshot& s, std::ostream& out, const PerfettoOptions& opt) {
  TraceOut t(out);
  DeviceEvents events(t, s, opt);
  write_header(t, s);
  const int n = analysis::device_count(s);
  const analysis::RankIdentity id = analysis::rank_identity(s);
  int devices_shown = 0;
  if (id.known())
    for (int device = 0; device < n; ++device) devices_shown += device_shown(s, device);
  for (int device = 0; device < n; ++device) {
    if (!device_shown(s, device)) continue;
    const analysis::DeviceReplay rp(s, device);
    const int pid = write_device_tracks(t, id, device, devices_shown);
    events.write(rp, pid);
    if (s.tool) {
      for (const auto& m : s.tool->driver_memory)
        if (m.device == device) counter(t, "driver-visible", m.time_us, pid, m.used_bytes);
    }
    const auto& tr = rp.trace();
    marks(t, s, device, pid, tr.empty() ? 0 : tr.back().time_us);
  }
  t.raw().append("],\n");
  events.write_frames();
  t.raw().append("}\n");
  t.flush();
}

std::string to_perfetto(const snap::Snapshot& s, const PerfettoOptions& opt) {
  std::ostringstream out;
  write_perfetto(s, out, opt);
  return std::move(out).str();
}

}  // namespace cumemtrace::viz
