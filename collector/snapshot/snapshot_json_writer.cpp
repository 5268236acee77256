#include "snapshot/snapshot_json_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <ostream>
#include <stdexcept>

#include <fmt/format.h>

#include "snapshot/utf8.h"

namespace cumemtrace::snap {

namespace {

// The output buffer. With a sink it is handed out in pieces of a few MiB at entry boundaries, so
// writing a snapshot of a million events never holds the whole file in memory.
struct Buf {
  fmt::memory_buffer mem;
  std::function<void(const char*, size_t)> sink;

  void push_back(char c) { mem.push_back(c); }
  void append(const char* b, const char* e) { mem.append(b, e); }
  const char* data() const { return mem.data(); }
  size_t size() const { return mem.size(); }
  void boundary() {
    if (sink && mem.size() > (size_t{4} << 20)) flush();
  }
  void flush() {
    if (sink && mem.size()) sink(mem.data(), mem.size());
    mem.clear();
  }
};

void put(Buf& b, std::string_view s) {
  b.append(s.data(), s.data() + s.size());
}

// Text is whatever bytes the program had (argv, thread and mark names, file paths, symbols), but
// JSON carries UTF-8 only: each byte that is not part of a valid UTF-8 sequence is written as
// U+FFFD, so every reader (ours, Python's, memory_viz's) opens the file, and reading it back and
// writing again gives the same bytes.
void put_string(Buf& b, std::string_view raw) {
  std::string fixed;
  std::string_view s = raw;
  if (!viz::valid_utf8(raw)) {
    fixed = viz::to_valid_utf8(raw);
    s = fixed;
  }
  b.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        put(b, "\\\"");
        break;
      case '\\':
        put(b, "\\\\");
        break;
      case '\n':
        put(b, "\\n");
        break;
      case '\r':
        put(b, "\\r");
        break;
      case '\t':
        put(b, "\\t");
        break;
      default:
        if (c < 0x20) {
          fmt::format_to(fmt::appender(b.mem), "\\u{:04x}", c);
        } else {
          b.push_back(static_cast<char>(c));
        }
    }
  }
  b.push_back('"');
}

template <typename T>
void put_num(Buf& b, T v) {
  fmt::format_to(fmt::appender(b.mem), "{}", v);
}

void put_key(Buf& b, std::string_view k) {
  put_string(b, k);
  b.push_back(':');
}

// Stacks are pre-rendered once: a stack shared by 100k events is formatted once.
std::vector<std::string> render_stacks(const Snapshot& s) {
  std::vector<std::string> out;
  out.reserve(s.stacks.size());
  for (const auto& st : s.stacks) {
    Buf b;
    b.push_back('[');
    for (size_t i = 0; i < st.size(); ++i) {
      if (i) b.push_back(',');
      put(b, "{\"filename\":");
      put_string(b, st[i].filename);
      put(b, ",\"line\":");
      put_num(b, st[i].line);
      put(b, ",\"name\":");
      put_string(b, st[i].name);
      b.push_back('}');
    }
    b.push_back(']');
    out.emplace_back(b.data(), b.size());
  }
  return out;
}

void put_frames(Buf& b, const std::vector<std::string>& rendered, int32_t stack) {
  put(b, ",\"frames\":");
  if (stack >= 0 && static_cast<size_t>(stack) < rendered.size()) {
    put(b, rendered[stack]);
  } else {
    put(b, "[]");
  }
}

void put_source(Buf& b, Source s) {
  if (s == Source::kPytorch) put(b, ",\"source\":\"pytorch\"");
  if (s == Source::kGraph) put(b, ",\"source\":\"graph\"");
}

void put_string_map(Buf& b, const std::map<std::string, std::string>& m) {
  b.push_back('{');
  bool first = true;
  viz::for_each_distinct_key(m, [&](const std::string& k, const std::string& v) {
    if (!first) b.push_back(',');
    first = false;
    put_key(b, k);
    put_string(b, v);
  });
  b.push_back('}');
}

void put_tool(Buf& b, const ToolSection& t, const std::vector<std::string>& rendered) {
  put(b, "{\"schema_version\":");
  put_num(b, t.schema_version);
  put(b, ",\"tool_version\":");
  put_string(b, t.tool_version);
  put(b, ",\"pid\":");
  put_num(b, t.pid);
  put(b, ",\"ppid\":");
  put_num(b, t.ppid);
  put(b, ",\"exe\":");
  put_string(b, t.exe);
  put(b, ",\"argv\":[");
  for (size_t i = 0; i < t.argv.size(); ++i) {
    if (i) b.push_back(',');
    put_string(b, t.argv[i]);
  }
  put(b, "],\"hostname\":");
  put_string(b, t.hostname);
  put(b, ",\"rank\":");
  put_string_map(b, t.rank);
  put(b, ",\"start_time_us\":");
  put_num(b, t.start_time_us);
  put(b, ",\"end_time_us\":");
  put_num(b, t.end_time_us);
  put(b, ",\"reason\":");
  put_string(b, t.reason);
  if (!t.tag.empty()) {
    put(b, ",\"tag\":");
    put_string(b, t.tag);
  }
  put(b, ",\"ended\":{\"how\":");
  put_string(b, t.ended.how);
  put(b, ",\"code\":");
  put_num(b, t.ended.code);
  put(b, ",\"signal\":");
  put_num(b, t.ended.signal);
  put(b, "},\"events_total\":");
  put_num(b, t.events_total);
  put(b, ",\"events_dropped\":");
  put_num(b, t.events_dropped);
  if (!t.ring_error.empty()) {
    put(b, ",\"ring_error\":");
    put_string(b, t.ring_error);
  }
  if (t.time_resolution_ns) {
    put(b, ",\"time_resolution_ns\":");
    put_num(b, t.time_resolution_ns);
  }
  put(b, ",\"trace_entries_dropped\":");
  put_num(b, t.trace_entries_dropped);
  put(b, ",\"devices\":[");
  for (size_t i = 0; i < t.devices.size(); ++i) {
    const auto& d = t.devices[i];
    if (i) b.push_back(',');
    fmt::format_to(fmt::appender(b.mem),
                   "{{\"device\":{},\"peak_bytes\":{},\"peak_time_us\":{},\"live_bytes\":{},"
                   "\"allocations\":{},\"frees\":{}",
                   d.device, d.peak_bytes, d.peak_time_us, d.live_bytes, d.allocations, d.frees);
    if (d.graph_reserved_peak_bytes) {
      fmt::format_to(fmt::appender(b.mem),
                     ",\"graph_reserved_bytes\":{},\"graph_reserved_peak_bytes\":{}",
                     d.graph_reserved_bytes, d.graph_reserved_peak_bytes);
    }
    b.push_back('}');
  }
  put(b, "],\"vmm_handles\":[");
  for (size_t i = 0; i < t.vmm_handles.size(); ++i) {
    const auto& h = t.vmm_handles[i];
    if (i) b.push_back(',');
    fmt::format_to(fmt::appender(b.mem), "{{\"handle\":{},\"size\":{},\"device\":{},\"time_us\":{}",
                   h.handle, h.size, h.device, h.time_us);
    put_frames(b, rendered, h.stack);
    b.push_back('}');
  }
  put(b, "],\"imported_mappings\":[");
  for (size_t i = 0; i < t.imported_mappings.size(); ++i) {
    const auto& m = t.imported_mappings[i];
    if (i) b.push_back(',');
    fmt::format_to(fmt::appender(b.mem),
                   "{{\"addr\":{},\"size\":{},\"device\":{},\"handle\":{},\"time_us\":{}", m.addr,
                   m.size, m.device, m.handle, m.time_us);
    put_frames(b, rendered, m.stack);
    b.push_back('}');
  }
  put(b, "],\"host_allocations\":[");
  for (size_t i = 0; i < t.host_allocations.size(); ++i) {
    const auto& h = t.host_allocations[i];
    if (i) b.push_back(',');
    fmt::format_to(fmt::appender(b.mem),
                   "{{\"addr\":{},\"size\":{},\"time_us\":{},\"api\":", h.addr, h.size, h.time_us);
    put_string(b, h.api);
    put_frames(b, rendered, h.stack);
    b.push_back('}');
  }
  put(b, "],\"anomalies\":[");
  for (size_t i = 0; i < t.anomalies.size(); ++i) {
    const auto& a = t.anomalies[i];
    if (i) b.push_back(',');
    put(b, "{\"kind\":");
    put_string(b, a.kind);
    fmt::format_to(fmt::appender(b.mem), ",\"addr\":{},\"time_us\":{},\"tid\":{},\"api\":", a.addr,
                   a.time_us, a.tid);
    put_string(b, a.api);
    put_frames(b, rendered, a.stack);
    b.push_back('}');
  }
  put(b, "],\"threads\":");
  put_string_map(b, t.threads);
  put(b, ",\"driver_memory\":[");
  for (size_t i = 0; i < t.driver_memory.size(); ++i) {
    const auto& m = t.driver_memory[i];
    if (i) b.push_back(',');
    fmt::format_to(fmt::appender(b.mem), "{{\"time_us\":{},\"device\":{},\"used_bytes\":{}}}",
                   m.time_us, m.device, m.used_bytes);
  }
  put(b, "]");
  if (!t.pool_memory.empty()) {
    put(b, ",\"pool_memory\":[");
    for (size_t i = 0; i < t.pool_memory.size(); ++i) {
      const auto& m = t.pool_memory[i];
      if (i) b.push_back(',');
      fmt::format_to(fmt::appender(b.mem),
                     "{{\"time_us\":{},\"device\":{},\"pool\":{},\"reserved_bytes\":{},"
                     "\"used_bytes\":{}}}",
                     m.time_us, m.device, m.pool, m.reserved_bytes, m.used_bytes);
    }
    put(b, "]");
  }
  if (!t.contexts.empty()) {
    put(b, ",\"contexts\":[");
    for (size_t i = 0; i < t.contexts.size(); ++i) {
      const auto& c = t.contexts[i];
      if (i) b.push_back(',');
      fmt::format_to(fmt::appender(b.mem), "{{\"device\":{},\"bytes\":{},\"time_us\":{},", c.device,
                     c.bytes, c.time_us);
      if (c.end_time_us) fmt::format_to(fmt::appender(b.mem), "\"end_time_us\":{},", c.end_time_us);
      put(b, "\"api\":");
      put_string(b, c.api);
      fmt::format_to(fmt::appender(b.mem), ",\"handle\":{}}}", c.handle);
    }
    put(b, "]");
  }
  if (!t.ownership.empty()) {
    put(b, ",\"ownership\":[");
    for (size_t i = 0; i < t.ownership.size(); ++i) {
      const auto& w = t.ownership[i];
      if (i) b.push_back(',');
      fmt::format_to(fmt::appender(b.mem), "{{\"time_us\":{},\"role\":\"{}\",\"tensors\":[",
                     w.time_us, owner_role_name(w.role));
      for (size_t j = 0; j < w.tensors.size(); ++j) {
        if (j) b.push_back(',');
        fmt::format_to(fmt::appender(b.mem), "[{},{}]", w.tensors[j].first, w.tensors[j].second);
      }
      put(b, "]}");
      b.boundary();
    }
    put(b, "]");
  }
  if (t.pytorch) {
    const PytorchInfo& p = *t.pytorch;
    put(b, ",\"pytorch\":{\"version\":");
    put_string(b, p.version);
    put(b, ",\"backend\":");
    put_string(b, p.backend);
    put(b, ",\"expandable_segments\":");
    put(b, p.expandable_segments ? "true" : "false");
    put(b, ",\"capture\":");
    put_string(b, p.capture);
    put(b, ",\"why\":");
    put_string(b, p.why);
    b.push_back('}');
  }
  b.push_back('}');
}

void put_snapshot(Buf& b, const Snapshot& s) {
  const auto rendered = render_stacks(s);
  // "source" is written only in cumemtrace's files: in PyTorch's own (no tool section) every
  // entry and segment is PyTorch's, and the readers say so.
  const bool explicit_source = s.tool.has_value();
  put(b, "{\"segments\":[");
  for (size_t i = 0; i < s.segments.size(); ++i) {
    const auto& g = s.segments[i];
    if (i) b.push_back(',');
    fmt::format_to(fmt::appender(b.mem),
                   "\n{{\"device\":{},\"address\":{},\"total_size\":{},\"allocated_size\":{},"
                   "\"active_size\":{},\"requested_size\":{},\"stream\":{},\"segment_type\":",
                   g.device, g.address, g.total_size, g.allocated_size, g.active_size,
                   g.requested_size, g.stream);
    put_string(b, g.segment_type);
    put(b, ",\"segment_pool_id\":[0,0],\"is_expandable\":");
    put(b, g.is_expandable ? "true" : "false");
    if (explicit_source) put_source(b, g.source);
    put_frames(b, rendered, g.stack);
    put(b, ",\"blocks\":[");
    for (size_t j = 0; j < g.blocks.size(); ++j) {
      const auto& k = g.blocks[j];
      if (j) b.push_back(',');
      fmt::format_to(fmt::appender(b.mem),
                     "{{\"address\":{},\"size\":{},\"requested_size\":{},\"state\":", k.address,
                     k.size, k.requested_size);
      put_string(b, k.state);
      put_frames(b, rendered, k.stack);
      b.push_back('}');
    }
    put(b, "]}");
    b.boundary();
  }
  put(b, "],\n\"device_traces\":[");
  const auto stand_in = unknown_category_stand_in(s);
  for (size_t d = 0; d < s.device_traces.size(); ++d) {
    if (d) b.push_back(',');
    b.push_back('[');
    const auto& tr = s.device_traces[d];
    for (size_t i = 0; i < tr.size(); ++i) {
      const auto& e = tr[i];
      if (i) b.push_back(',');
      put(b, "\n{\"action\":\"");
      put(b, action_name(e.action));
      if (e.action == Action::kOom) {
        fmt::format_to(fmt::appender(b.mem), "\",\"device_free\":{},\"size\":{},\"stream\":{}",
                       e.device_free, e.size, e.stream);
      } else {
        fmt::format_to(fmt::appender(b.mem), "\",\"addr\":{},\"size\":{},\"stream\":{}", e.addr,
                       e.size, e.stream);
      }
      fmt::format_to(fmt::appender(b.mem), ",\"time_us\":{}", e.time_us);
      if (e.tid) fmt::format_to(fmt::appender(b.mem), ",\"tid\":{}", e.tid);
      if (e.stream_per_thread) put(b, ",\"stream_per_thread\":true");
      if (e.async_pool) put(b, ",\"async_pool\":true");
      if (explicit_source) put_source(b, e.source);
      const Category category = stand_in == EntryIndex{d, i} ? Category::kUnknown : e.category;
      if (category != Category::kNone) {
        put(b, ",\"category\":\"");
        put(b, category_name(category));
        b.push_back('"');
      }
      if (writes_frames(e)) put_frames(b, rendered, e.stack);
      b.push_back('}');
      b.boundary();
    }
    b.push_back(']');
  }
  put(b, "],\n\"allocator_settings\":");
  put_string_map(b, s.allocator_settings);
  put(b, ",\n\"external_annotations\":[");
  for (size_t i = 0; i < s.annotations.size(); ++i) {
    const auto& a = s.annotations[i];
    if (i) b.push_back(',');
    put(b, "{\"name\":");
    put_string(b, a.name);
    put(b, ",\"stage\":");
    put_string(b, a.stage);
    fmt::format_to(fmt::appender(b.mem), ",\"device\":{},\"time_us\":{}}}", a.device, a.time_us);
  }
  put(b, "]");
  if (s.tool) {
    put(b, ",\n\"cumemtrace\":");
    put_tool(b, *s.tool, rendered);
  }
  put(b, "}\n");
}

}  // namespace

std::string to_json(const Snapshot& s) {
  Buf b;
  put_snapshot(b, s);
  return std::string(b.data(), b.size());
}

void write_json(const Snapshot& s, std::ostream& out) {
  Buf b;
  b.sink = [&](const char* p, size_t n) { out.write(p, static_cast<std::streamsize>(n)); };
  put_snapshot(b, s);
  b.flush();
}

std::string write_snapshot_file(const Snapshot& s, const std::string& path) {
  std::string stem = path;
  std::string ext;
  if (auto dot = path.rfind(".json"); dot != std::string::npos && dot + 5 == path.size()) {
    stem = path.substr(0, dot);
    ext = ".json";
  }
  std::string name = path;
  int fd = -1;
  for (int i = 1; i < 1000; ++i) {
    fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) break;
    name = fmt::format("{}.{}{}", stem, i, ext);
  }
  if (fd < 0) throw std::runtime_error(fmt::format("cannot create {}: {}", name, strerror(errno)));
  int write_errno = 0;
  Buf b;
  b.sink = [&](const char* p, size_t left) {
    while (left > 0 && !write_errno) {
      ssize_t n = ::write(fd, p, left);
      if (n < 0) {
        if (errno != EINTR) write_errno = errno;
        continue;
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
  };
  put_snapshot(b, s);
  b.flush();
  if (::close(fd) != 0 && !write_errno) write_errno = errno;
  if (write_errno) {
    ::unlink(name.c_str());  // never leave a truncated snapshot behind
    throw std::runtime_error(fmt::format("cannot write {}: {}", name, strerror(write_errno)));
  }
  return name;
}

}  // namespace cumemtrace::snap
