#include "snapshot/snapshot_json_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <ostream>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>

#include "snapshot/snapshot_fields.h"
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
  if (!snap::valid_utf8(raw)) {
    fixed = snap::to_valid_utf8(raw);
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
      if (!st[i].module.empty()) {
        put(b, ",\"module\":");
        put_string(b, st[i].module);
      }
      b.push_back('}');
    }
    b.push_back(']');
    out.emplace_back(b.data(), b.size());
  }
  return out;
}

void put_frames_value(Buf& b, const std::vector<std::string>& rendered, int32_t stack) {
  if (stack >= 0 && static_cast<size_t>(stack) < rendered.size()) {
    put(b, rendered[stack]);
  } else {
    put(b, "[]");
  }
}

void put_frames(Buf& b, const std::vector<std::string>& rendered, int32_t stack) {
  put(b, ",\"frames\":");
  put_frames_value(b, rendered, stack);
}

void put_source(Buf& b, Source s) {
  if (s == Source::kPytorch) put(b, ",\"source\":\"pytorch\"");
  if (s == Source::kGraph) put(b, ",\"source\":\"graph\"");
}

void put_string_map(Buf& b, const std::map<std::string, std::string>& m) {
  b.push_back('{');
  bool first = true;
  snap::for_each_distinct_key(m, [&](const std::string& k, const std::string& v) {
    if (!first) b.push_back(',');
    first = false;
    put_key(b, k);
    put_string(b, v);
  });
  b.push_back('}');
}

// Writes a described object (snapshot_fields.h): its fields in table order, those it writes.
struct FieldWriter {
  Buf& b;
  const std::vector<std::string>& rendered;
  bool first = true;

  template <typename O>
  void object(const O& o) {
    b.push_back('{');
    FieldWriter inner{b, rendered};
    fields::describe(o, inner);
    b.push_back('}');
  }

  template <typename M>
  void operator()(const fields::Field& f, const M& m) {
    if (!f.write) return;
    if (!first) b.push_back(',');
    first = false;
    put_key(b, f.key);
    value(f, m);
  }

  template <typename M>
  void value(const fields::Field& f, const M& m) {
    using fields::Kind;
    if constexpr (std::is_same_v<M, std::string>) {
      put_string(b, m);
    } else if constexpr (std::is_same_v<M, bool>) {
      put(b, m ? "true" : "false");
    } else if constexpr (std::is_same_v<M, OwnerRole>) {
      put_string(b, owner_role_name(m));
    } else if constexpr (std::is_same_v<M, int32_t>) {
      if (f.kind == Kind::kFrames) {
        put_frames_value(b, rendered, m);
      } else {
        put_num(b, m);
      }
    } else if constexpr (std::is_integral_v<M>) {
      put_num(b, m);
    } else if constexpr (std::is_same_v<M, std::vector<std::string>>) {
      b.push_back('[');
      for (size_t i = 0; i < m.size(); ++i) {
        if (i) b.push_back(',');
        put_string(b, m[i]);
      }
      b.push_back(']');
    } else if constexpr (std::is_same_v<M, std::map<std::string, std::string>>) {
      put_string_map(b, m);
    } else if constexpr (std::is_same_v<M, std::vector<std::pair<uint64_t, uint64_t>>>) {
      b.push_back('[');
      for (size_t i = 0; i < m.size(); ++i) {
        if (i) b.push_back(',');
        fmt::format_to(fmt::appender(b.mem), "[{},{}]", m[i].first, m[i].second);
      }
      b.push_back(']');
    } else if constexpr (requires { m.has_value(); }) {
      object(*m);
    } else if constexpr (requires { m.size(); }) {
      b.push_back('[');
      for (size_t i = 0; i < m.size(); ++i) {
        if (i) b.push_back(',');
        object(m[i]);
        b.boundary();
      }
      b.push_back(']');
    } else {
      object(m);
    }
  }
};

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
    put(b, g.private_pool ? ",\"segment_pool_id\":[1,0],\"is_expandable\":"
                          : ",\"segment_pool_id\":[0,0],\"is_expandable\":");
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
    if (i) b.push_back(',');
    FieldWriter{b, rendered}.object(s.annotations[i]);
  }
  put(b, "]");
  if (s.tool) {
    put(b, ",\n\"cumemtrace\":");
    FieldWriter{b, rendered}.object(*s.tool);
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
