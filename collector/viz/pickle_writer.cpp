#include "viz/pickle_writer.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "viz/utf8.h"

namespace cumemtrace::viz {

namespace {

enum Op : char {
  kMark = '(',
  kStop = '.',
  kEmptyDict = '}',
  kEmptyList = ']',
  kSetItems = 'u',
  kAppend = 'a',
  kAppends = 'e',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kBinUnicode = 'X',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kProto = '\x80',
  kTuple2 = '\x86',
  kNewTrue = '\x88',
  kNewFalse = '\x89',
  kLong1 = '\x8a',
  kShortBinUnicode = '\x8c',
  kMemoize = '\x94',
};

class Pickler {
 public:
  explicit Pickler(std::ostream& out) : out_(out) {}

  void op(Op o) { buf_.push_back(static_cast<char>(o)); }

  void le(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }

  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      op(kBinInt1);
      le(static_cast<uint64_t>(v), 1);
    } else if (v >= 0 && v < 65536) {
      op(kBinInt2);
      le(static_cast<uint64_t>(v), 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      op(kBinInt);
      le(static_cast<uint64_t>(v), 4);
    } else {
      // Minimal little-endian two's complement, as Python's encode_long writes it.
      unsigned char b[8];
      for (int i = 0; i < 8; ++i)
        b[i] = static_cast<unsigned char>((static_cast<uint64_t>(v) >> (8 * i)) & 0xff);
      int n = 8;
      while (n > 1 &&
             ((b[n - 1] == 0x00 && !(b[n - 2] & 0x80)) || (b[n - 1] == 0xff && (b[n - 2] & 0x80))))
        --n;
      op(kLong1);
      buf_.push_back(static_cast<char>(n));
      buf_.append(reinterpret_cast<const char*>(b), n);
    }
  }

  void unsigned_integer(uint64_t v) {
    if (v <= static_cast<uint64_t>(INT64_MAX)) return integer(static_cast<int64_t>(v));
    // Top bit set: a ninth zero byte keeps it positive.
    op(kLong1);
    buf_.push_back(9);
    le(v, 8);
    buf_.push_back(0);
  }

  void boolean(bool b) { op(b ? kNewTrue : kNewFalse); }

  void string(std::string_view s) {
    auto it = strings_.find(std::string(s));
    if (it != strings_.end()) return get(it->second);
    const std::string text = valid_utf8(s) ? std::string(s) : to_valid_utf8(s);
    if (text.size() < 256) {
      op(kShortBinUnicode);
      buf_.push_back(static_cast<char>(text.size()));
    } else {
      op(kBinUnicode);
      le(text.size(), 4);
    }
    buf_.append(text);
    strings_.emplace(std::string(s), memoize());
  }

  uint32_t memoize() {
    op(kMemoize);
    return next_memo_++;
  }

  void get(uint32_t id) {
    if (id < 256) {
      op(kBinGet);
      le(id, 1);
    } else {
      op(kLongBinGet);
      le(id, 4);
    }
  }

  // A list of n items, item(i) writing each; batches of kPickleBatch per MARK...APPENDS.
  template <typename F>
  void list(size_t n, F&& item, std::optional<uint32_t>* memo_id = nullptr) {
    op(kEmptyList);
    if (memo_id) *memo_id = memoize();
    for (size_t start = 0; start < n; start += kPickleBatch) {
      const size_t end = std::min(n, start + kPickleBatch);
      if (end - start == 1) {
        item(start);
        op(kAppend);
        continue;
      }
      op(kMark);
      for (size_t i = start; i < end; ++i) item(i);
      op(kAppends);
      maybe_flush();
    }
  }

  // A dict whose n entries item(i) writes as key then value.
  template <typename F>
  void dict(size_t n, F&& item) {
    op(kEmptyDict);
    for (size_t start = 0; start < n; start += kPickleBatch) {
      const size_t end = std::min(n, start + kPickleBatch);
      op(kMark);
      for (size_t i = start; i < end; ++i) item(i);
      op(kSetItems);
    }
  }

  void maybe_flush() {
    if (buf_.size() >= (1u << 20)) flush();
  }
  void flush() {
    out_.write(buf_.data(), static_cast<std::streamsize>(buf_.size()));
    buf_.clear();
  }

 private:
  std::ostream& out_;
  std::string buf_;
  std::unordered_map<std::string, uint32_t> strings_;
  uint32_t next_memo_ = 0;
};

// Writes objects in the JSON writer's layout, key for key.
class SnapshotPickler {
 public:
  SnapshotPickler(const snap::Snapshot& s, Pickler& p)
      : s_(s), p_(p), stack_memo_(s.stacks.size()) {}

  void snapshot() {
    const size_t keys = 4 + (s_.tool ? 1 : 0);
    p_.dict(keys, [&](size_t i) {
      switch (i) {
        case 0:
          p_.string("segments");
          p_.list(s_.segments.size(), [&](size_t j) { segment(s_.segments[j]); });
          break;
        case 1:
          p_.string("device_traces");
          p_.list(s_.device_traces.size(), [&](size_t d) {
            const auto& tr = s_.device_traces[d];
            p_.list(tr.size(), [&](size_t j) { entry(tr[j]); });
          });
          break;
        case 2:
          p_.string("allocator_settings");
          string_map(s_.allocator_settings);
          break;
        case 3:
          p_.string("external_annotations");
          p_.list(s_.annotations.size(), [&](size_t j) { annotation(s_.annotations[j]); });
          break;
        case 4:
          p_.string("cumemtrace");
          tool(*s_.tool);
          break;
      }
    });
  }

 private:
  void key_int(std::string_view k, int64_t v) {
    p_.string(k);
    p_.integer(v);
  }
  void key_uint(std::string_view k, uint64_t v) {
    p_.string(k);
    p_.unsigned_integer(v);
  }
  void key_str(std::string_view k, std::string_view v) {
    p_.string(k);
    p_.string(v);
  }

  void frames(int32_t stack) {
    p_.string("frames");
    if (stack < 0 || static_cast<size_t>(stack) >= s_.stacks.size()) {
      p_.list(0, [](size_t) {});
      return;
    }
    auto& memo = stack_memo_[stack];
    if (memo) return p_.get(*memo);
    const auto& st = s_.stacks[stack];
    p_.list(
        st.size(),
        [&](size_t i) {
          p_.dict(3, [&](size_t k) {
            if (k == 0) key_str("filename", st[i].filename);
            if (k == 1) key_int("line", st[i].line);
            if (k == 2) key_str("name", st[i].name);
          });
        },
        &memo);
  }

  void string_map(const std::map<std::string, std::string>& m) {
    auto it = m.begin();
    p_.dict(m.size(), [&](size_t) {
      key_str(it->first, it->second);
      ++it;
    });
  }

  void segment(const snap::Segment& g) {
    p_.dict(12, [&](size_t k) {
      switch (k) {
        case 0:
          key_int("device", g.device);
          break;
        case 1:
          key_uint("address", g.address);
          break;
        case 2:
          key_uint("total_size", g.total_size);
          break;
        case 3:
          key_uint("allocated_size", g.allocated_size);
          break;
        case 4:
          key_uint("active_size", g.active_size);
          break;
        case 5:
          key_uint("requested_size", g.requested_size);
          break;
        case 6:
          key_uint("stream", g.stream);
          break;
        case 7:
          key_str("segment_type", g.segment_type);
          break;
        case 8:
          p_.string("segment_pool_id");
          p_.integer(0);
          p_.integer(0);
          p_.op(kTuple2);
          break;
        case 9:
          p_.string("is_expandable");
          p_.boolean(g.is_expandable);
          break;
        case 10:
          frames(g.stack);
          break;
        case 11:
          p_.string("blocks");
          p_.list(g.blocks.size(), [&](size_t j) { block(g.blocks[j]); });
          break;
      }
    });
  }

  void block(const snap::Block& b) {
    p_.dict(5, [&](size_t k) {
      switch (k) {
        case 0:
          key_uint("address", b.address);
          break;
        case 1:
          key_uint("size", b.size);
          break;
        case 2:
          key_uint("requested_size", b.requested_size);
          break;
        case 3:
          key_str("state", b.state);
          break;
        case 4:
          frames(b.stack);
          break;
      }
    });
  }

  void entry(const snap::TraceEntry& e) {
    const bool oom = e.action == snap::Action::kOom;
    const bool with_frames =
        e.action == snap::Action::kAlloc || oom || e.action == snap::Action::kSegmentMap;
    const size_t n = 5 + (e.tid ? 1 : 0) + (with_frames ? 1 : 0);
    p_.dict(n, [&](size_t k) {
      switch (k) {
        case 0:
          key_str("action", snap::action_name(e.action));
          break;
        case 1:
          oom ? key_uint("device_free", e.device_free) : key_uint("addr", e.addr);
          break;
        case 2:
          key_uint("size", e.size);
          break;
        case 3:
          key_uint("stream", e.stream);
          break;
        case 4:
          key_int("time_us", e.time_us);
          break;
        case 5:
          if (e.tid) {
            key_uint("tid", e.tid);
          } else {
            frames(e.stack);
          }
          break;
        case 6:
          frames(e.stack);
          break;
      }
    });
  }

  void annotation(const snap::Annotation& a) {
    p_.dict(4, [&](size_t k) {
      switch (k) {
        case 0:
          key_str("name", a.name);
          break;
        case 1:
          key_str("stage", a.stage);
          break;
        case 2:
          key_int("device", a.device);
          break;
        case 3:
          key_int("time_us", a.time_us);
          break;
      }
    });
  }

  void tool(const snap::ToolSection& t) {
    // Same keys as the JSON writer; `tag` and `ring_error` only when set, in that order.
    const bool tagged = !t.tag.empty();
    const size_t optional = size_t{tagged} + size_t{!t.ring_error.empty()};
    p_.dict(22 + optional, [&](size_t k) {
      if (k == 22 && !tagged) k = 23;
      switch (k) {
        case 0:
          key_int("schema_version", t.schema_version);
          break;
        case 1:
          key_str("tool_version", t.tool_version);
          break;
        case 2:
          key_int("pid", t.pid);
          break;
        case 3:
          key_int("ppid", t.ppid);
          break;
        case 4:
          key_str("exe", t.exe);
          break;
        case 5:
          p_.string("argv");
          p_.list(t.argv.size(), [&](size_t i) { p_.string(t.argv[i]); });
          break;
        case 6:
          key_str("hostname", t.hostname);
          break;
        case 7:
          p_.string("rank");
          string_map(t.rank);
          break;
        case 8:
          key_int("start_time_us", t.start_time_us);
          break;
        case 9:
          key_int("end_time_us", t.end_time_us);
          break;
        case 10:
          key_str("reason", t.reason);
          break;
        case 11:
          p_.string("ended");
          p_.dict(3, [&](size_t j) {
            if (j == 0) key_str("how", t.ended.how);
            if (j == 1) key_int("code", t.ended.code);
            if (j == 2) key_int("signal", t.ended.signal);
          });
          break;
        case 12:
          key_uint("events_total", t.events_total);
          break;
        case 13:
          key_uint("events_dropped", t.events_dropped);
          break;
        case 14:
          p_.string("devices");
          p_.list(t.devices.size(), [&](size_t i) {
            const auto& d = t.devices[i];
            p_.dict(6, [&](size_t j) {
              switch (j) {
                case 0:
                  key_int("device", d.device);
                  break;
                case 1:
                  key_uint("peak_bytes", d.peak_bytes);
                  break;
                case 2:
                  key_int("peak_time_us", d.peak_time_us);
                  break;
                case 3:
                  key_uint("live_bytes", d.live_bytes);
                  break;
                case 4:
                  key_uint("allocations", d.allocations);
                  break;
                case 5:
                  key_uint("frees", d.frees);
                  break;
              }
            });
          });
          break;
        case 15:
          p_.string("vmm_handles");
          p_.list(t.vmm_handles.size(), [&](size_t i) {
            const auto& h = t.vmm_handles[i];
            p_.dict(5, [&](size_t j) {
              switch (j) {
                case 0:
                  key_uint("handle", h.handle);
                  break;
                case 1:
                  key_uint("size", h.size);
                  break;
                case 2:
                  key_int("device", h.device);
                  break;
                case 3:
                  key_int("time_us", h.time_us);
                  break;
                case 4:
                  frames(h.stack);
                  break;
              }
            });
          });
          break;
        case 16:
          p_.string("host_allocations");
          p_.list(t.host_allocations.size(), [&](size_t i) {
            const auto& h = t.host_allocations[i];
            p_.dict(5, [&](size_t j) {
              switch (j) {
                case 0:
                  key_uint("addr", h.addr);
                  break;
                case 1:
                  key_uint("size", h.size);
                  break;
                case 2:
                  key_int("time_us", h.time_us);
                  break;
                case 3:
                  key_str("api", h.api);
                  break;
                case 4:
                  frames(h.stack);
                  break;
              }
            });
          });
          break;
        case 17:
          p_.string("anomalies");
          p_.list(t.anomalies.size(), [&](size_t i) {
            const auto& a = t.anomalies[i];
            p_.dict(6, [&](size_t j) {
              switch (j) {
                case 0:
                  key_str("kind", a.kind);
                  break;
                case 1:
                  key_uint("addr", a.addr);
                  break;
                case 2:
                  key_int("time_us", a.time_us);
                  break;
                case 3:
                  key_uint("tid", a.tid);
                  break;
                case 4:
                  key_str("api", a.api);
                  break;
                case 5:
                  frames(a.stack);
                  break;
              }
            });
          });
          break;
        case 18:
          p_.string("threads");
          string_map(t.threads);
          break;
        case 19:
          key_uint("trace_entries_dropped", t.trace_entries_dropped);
          break;
        case 20:
          p_.string("driver_memory");
          p_.list(t.driver_memory.size(), [&](size_t i) {
            const auto& m = t.driver_memory[i];
            p_.dict(3, [&](size_t j) {
              if (j == 0) key_int("time_us", m.time_us);
              if (j == 1) key_int("device", m.device);
              if (j == 2) key_uint("used_bytes", m.used_bytes);
            });
          });
          break;
        case 21:
          p_.string("imported_mappings");
          p_.list(t.imported_mappings.size(), [&](size_t i) {
            const auto& m = t.imported_mappings[i];
            p_.dict(6, [&](size_t j) {
              if (j == 0) key_uint("addr", m.addr);
              if (j == 1) key_uint("size", m.size);
              if (j == 2) key_int("device", m.device);
              if (j == 3) key_uint("handle", m.handle);
              if (j == 4) key_int("time_us", m.time_us);
              if (j == 5) frames(m.stack);
            });
          });
          break;
        case 22:
          key_str("tag", t.tag);
          break;
        case 23:
          key_str("ring_error", t.ring_error);
          break;
      }
    });
  }

  const snap::Snapshot& s_;
  Pickler& p_;
  std::vector<std::optional<uint32_t>> stack_memo_;
};

}  // namespace

void write_pickle(const snap::Snapshot& s, std::ostream& out) {
  Pickler p(out);
  p.op(kProto);
  p.le(4, 1);
  SnapshotPickler(s, p).snapshot();
  p.op(kStop);
  p.flush();
}

std::string to_pickle(const snap::Snapshot& s) {
  std::ostringstream out;
  write_pickle(s, out);
  return std::move(out).str();
}

}  // namespace cumemtrace::viz
