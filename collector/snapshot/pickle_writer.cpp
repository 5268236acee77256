#include "snapshot/pickle_writer.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>

#include "snapshot/utf8.h"

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

  // A dict: body() writes its entries, each as key then value followed by item(); batches of
  // kPickleBatch entries per MARK...SETITEMS.
  template <typename F>
  void dict(F&& body) {
    op(kEmptyDict);
    op(kMark);
    dict_items_.push_back(0);
    body();
    dict_items_.pop_back();
    op(kSetItems);
  }
  void item() {
    if (++dict_items_.back() % kPickleBatch == 0) {
      op(kSetItems);
      op(kMark);
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
  std::vector<size_t> dict_items_;  // entries written so far, per open dict
};

// Writes objects in the JSON writer's layout, key for key (the same keys, order and optional keys
// as snapshot_json_writer.cpp, so the two files hold the same document).
class SnapshotPickler {
 public:
  SnapshotPickler(const snap::Snapshot& s, Pickler& p)
      : s_(s), p_(p), stack_memo_(s.stacks.size()), explicit_source_(s.tool.has_value()) {}

  void snapshot() {
    p_.dict([&] {
      p_.string("segments");
      p_.list(s_.segments.size(), [&](size_t j) { segment(s_.segments[j]); });
      p_.item();
      p_.string("device_traces");
      const auto stand_in = snap::unknown_category_stand_in(s_);
      p_.list(s_.device_traces.size(), [&](size_t d) {
        const auto& tr = s_.device_traces[d];
        p_.list(tr.size(), [&](size_t j) {
          entry(tr[j],
                stand_in == snap::EntryIndex{d, j} ? snap::Category::kUnknown : tr[j].category);
        });
      });
      p_.item();
      p_.string("allocator_settings");
      string_map(s_.allocator_settings);
      p_.item();
      p_.string("external_annotations");
      p_.list(s_.annotations.size(), [&](size_t j) { annotation(s_.annotations[j]); });
      p_.item();
      if (s_.tool) {
        p_.string("cumemtrace");
        tool(*s_.tool);
        p_.item();
      }
    });
  }

 private:
  void key_int(std::string_view k, int64_t v) {
    p_.string(k);
    p_.integer(v);
    p_.item();
  }
  void key_uint(std::string_view k, uint64_t v) {
    p_.string(k);
    p_.unsigned_integer(v);
    p_.item();
  }
  void key_str(std::string_view k, std::string_view v) {
    p_.string(k);
    p_.string(v);
    p_.item();
  }
  void key_bool(std::string_view k, bool v) {
    p_.string(k);
    p_.boolean(v);
    p_.item();
  }
  void source(snap::Source s) {
    if (explicit_source_ && s == snap::Source::kPytorch) key_str("source", "pytorch");
    if (explicit_source_ && s == snap::Source::kGraph) key_str("source", "graph");
  }

  void frames(int32_t stack) {
    p_.string("frames");
    if (stack < 0 || static_cast<size_t>(stack) >= s_.stacks.size()) {
      p_.list(0, [](size_t) {});
    } else if (auto& memo = stack_memo_[stack]) {
      p_.get(*memo);
    } else {
      const auto& st = s_.stacks[stack];
      p_.list(
          st.size(),
          [&](size_t i) {
            p_.dict([&] {
              key_str("filename", st[i].filename);
              key_int("line", st[i].line);
              key_str("name", st[i].name);
            });
          },
          &memo);
    }
    p_.item();
  }

  void string_map(const std::map<std::string, std::string>& m) {
    p_.dict([&] {
      for_each_distinct_key(m, [&](const std::string& k, const std::string& v) { key_str(k, v); });
    });
  }

  void segment(const snap::Segment& g) {
    p_.dict([&] {
      key_int("device", g.device);
      key_uint("address", g.address);
      key_uint("total_size", g.total_size);
      key_uint("allocated_size", g.allocated_size);
      key_uint("active_size", g.active_size);
      key_uint("requested_size", g.requested_size);
      key_uint("stream", g.stream);
      key_str("segment_type", g.segment_type);
      p_.string("segment_pool_id");
      p_.integer(0);
      p_.integer(0);
      p_.op(kTuple2);
      p_.item();
      key_bool("is_expandable", g.is_expandable);
      source(g.source);
      frames(g.stack);
      p_.string("blocks");
      p_.list(g.blocks.size(), [&](size_t j) { block(g.blocks[j]); });
      p_.item();
    });
  }

  void block(const snap::Block& b) {
    p_.dict([&] {
      key_uint("address", b.address);
      key_uint("size", b.size);
      key_uint("requested_size", b.requested_size);
      key_str("state", b.state);
      frames(b.stack);
    });
  }

  // `category`: the entry's, or kUnknown where the file needs one
  // (snap::unknown_category_stand_in).
  void entry(const snap::TraceEntry& e, snap::Category category) {
    const bool oom = e.action == snap::Action::kOom;
    p_.dict([&] {
      key_str("action", snap::action_name(e.action));
      if (oom) {
        key_uint("device_free", e.device_free);
      } else {
        key_uint("addr", e.addr);
      }
      key_uint("size", e.size);
      key_uint("stream", e.stream);
      key_int("time_us", e.time_us);
      if (e.tid) key_uint("tid", e.tid);
      if (e.stream_per_thread) key_bool("stream_per_thread", true);
      if (e.async_pool) key_bool("async_pool", true);
      source(e.source);
      if (category != snap::Category::kNone) key_str("category", snap::category_name(category));
      if (snap::writes_frames(e)) frames(e.stack);
    });
  }

  void annotation(const snap::Annotation& a) {
    p_.dict([&] {
      key_str("name", a.name);
      key_str("stage", a.stage);
      key_int("device", a.device);
      key_int("time_us", a.time_us);
    });
  }

  template <typename T, typename F>
  void list_of_dicts(std::string_view key, const std::vector<T>& v, F&& body) {
    p_.string(key);
    p_.list(v.size(), [&](size_t i) { p_.dict([&] { body(v[i]); }); });
    p_.item();
  }

  void tool(const snap::ToolSection& t) {
    p_.dict([&] {
      key_int("schema_version", t.schema_version);
      key_str("tool_version", t.tool_version);
      key_int("pid", t.pid);
      key_int("ppid", t.ppid);
      key_str("exe", t.exe);
      p_.string("argv");
      p_.list(t.argv.size(), [&](size_t i) { p_.string(t.argv[i]); });
      p_.item();
      key_str("hostname", t.hostname);
      p_.string("rank");
      string_map(t.rank);
      p_.item();
      key_int("start_time_us", t.start_time_us);
      key_int("end_time_us", t.end_time_us);
      key_str("reason", t.reason);
      if (!t.tag.empty()) key_str("tag", t.tag);
      p_.string("ended");
      p_.dict([&] {
        key_str("how", t.ended.how);
        key_int("code", t.ended.code);
        key_int("signal", t.ended.signal);
      });
      p_.item();
      key_uint("events_total", t.events_total);
      key_uint("events_dropped", t.events_dropped);
      if (!t.ring_error.empty()) key_str("ring_error", t.ring_error);
      if (t.time_resolution_ns) key_uint("time_resolution_ns", t.time_resolution_ns);
      key_uint("trace_entries_dropped", t.trace_entries_dropped);
      list_of_dicts("devices", t.devices, [&](const snap::DeviceSummary& d) {
        key_int("device", d.device);
        key_uint("peak_bytes", d.peak_bytes);
        key_int("peak_time_us", d.peak_time_us);
        key_uint("live_bytes", d.live_bytes);
        key_uint("allocations", d.allocations);
        key_uint("frees", d.frees);
        if (d.graph_reserved_peak_bytes) {
          key_uint("graph_reserved_bytes", d.graph_reserved_bytes);
          key_uint("graph_reserved_peak_bytes", d.graph_reserved_peak_bytes);
        }
      });
      list_of_dicts("vmm_handles", t.vmm_handles, [&](const snap::VmmHandle& h) {
        key_uint("handle", h.handle);
        key_uint("size", h.size);
        key_int("device", h.device);
        key_int("time_us", h.time_us);
        frames(h.stack);
      });
      list_of_dicts("imported_mappings", t.imported_mappings, [&](const snap::ImportedMapping& m) {
        key_uint("addr", m.addr);
        key_uint("size", m.size);
        key_int("device", m.device);
        key_uint("handle", m.handle);
        key_int("time_us", m.time_us);
        frames(m.stack);
      });
      list_of_dicts("host_allocations", t.host_allocations, [&](const snap::HostAllocation& h) {
        key_uint("addr", h.addr);
        key_uint("size", h.size);
        key_int("time_us", h.time_us);
        key_str("api", h.api);
        frames(h.stack);
      });
      list_of_dicts("anomalies", t.anomalies, [&](const snap::Anomaly& a) {
        key_str("kind", a.kind);
        key_uint("addr", a.addr);
        key_int("time_us", a.time_us);
        key_uint("tid", a.tid);
        key_str("api", a.api);
        frames(a.stack);
      });
      p_.string("threads");
      string_map(t.threads);
      p_.item();
      list_of_dicts("driver_memory", t.driver_memory, [&](const snap::DriverMemorySample& m) {
        key_int("time_us", m.time_us);
        key_int("device", m.device);
        key_uint("used_bytes", m.used_bytes);
      });
      if (!t.pool_memory.empty()) {
        list_of_dicts("pool_memory", t.pool_memory, [&](const snap::PoolMemorySample& m) {
          key_int("time_us", m.time_us);
          key_int("device", m.device);
          key_uint("pool", m.pool);
          key_uint("reserved_bytes", m.reserved_bytes);
          key_uint("used_bytes", m.used_bytes);
        });
      }
      if (!t.contexts.empty()) {
        list_of_dicts("contexts", t.contexts, [&](const snap::ContextMemory& c) {
          key_int("device", c.device);
          key_uint("bytes", c.bytes);
          key_int("time_us", c.time_us);
          if (c.end_time_us) key_int("end_time_us", c.end_time_us);
          key_str("api", c.api);
          key_uint("handle", c.handle);
        });
      }
      if (!t.ownership.empty()) {
        list_of_dicts("ownership", t.ownership, [&](const snap::OwnerWalk& w) {
          key_int("time_us", w.time_us);
          key_str("role", snap::owner_role_name(w.role));
          p_.string("tensors");
          p_.list(w.tensors.size(), [&](size_t i) {
            const std::pair<uint64_t, uint64_t>& t = w.tensors[i];  // (pointer, bytes)
            p_.list(2, [&](size_t k) { p_.unsigned_integer(k ? t.second : t.first); });
          });
          p_.item();
        });
      }
      if (t.pytorch) {
        const snap::PytorchInfo& py = *t.pytorch;
        p_.string("pytorch");
        p_.dict([&] {
          key_str("version", py.version);
          key_str("backend", py.backend);
          key_bool("expandable_segments", py.expandable_segments);
          key_str("capture", py.capture);
          key_str("why", py.why);
        });
        p_.item();
      }
    });
  }

  const snap::Snapshot& s_;
  Pickler& p_;
  std::vector<std::optional<uint32_t>> stack_memo_;
  bool explicit_source_;
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
