#include "snapshot/pickle_writer.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <unordered_map>

#include "snapshot/snapshot_fields.h"
#include "snapshot/utf8.h"

namespace cumemtrace::snap {

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
// as snapshot_json_writer.cpp, so the two files hold the same document): the objects
// snapshot_fields.h describes from that table, PyTorch's segments and entries by hand.
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
      p_.list(s_.annotations.size(), [&](size_t j) { object(s_.annotations[j]); });
      p_.item();
      if (s_.tool) {
        p_.string("cumemtrace");
        object(*s_.tool);
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
              if (!st[i].module.empty()) key_str("module", st[i].module);
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
      p_.integer(g.private_pool ? 1 : 0);
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

  // A described object (snapshot_fields.h) as a dict: its fields in table order, those it
  // writes.
  template <typename O>
  void object(const O& o) {
    p_.dict([&] {
      fields::describe(o, [&](const fields::Field& f, const auto& m) {
        if (!f.write) return;
        if constexpr (std::is_same_v<std::decay_t<decltype(m)>, int32_t>) {
          if (f.kind == fields::Kind::kFrames) return frames(m);
        }
        p_.string(f.key);
        value(m);
        p_.item();
      });
    });
  }

  template <typename M>
  void value(const M& m) {
    if constexpr (std::is_same_v<M, std::string>) {
      p_.string(m);
    } else if constexpr (std::is_same_v<M, bool>) {
      p_.boolean(m);
    } else if constexpr (std::is_same_v<M, snap::OwnerRole>) {
      p_.string(snap::owner_role_name(m));
    } else if constexpr (std::is_integral_v<M> && std::is_unsigned_v<M>) {
      p_.unsigned_integer(m);
    } else if constexpr (std::is_integral_v<M>) {
      p_.integer(m);
    } else if constexpr (std::is_same_v<M, std::vector<std::string>>) {
      p_.list(m.size(), [&](size_t i) { p_.string(m[i]); });
    } else if constexpr (std::is_same_v<M, std::map<std::string, std::string>>) {
      string_map(m);
    } else if constexpr (std::is_same_v<M, std::vector<std::pair<uint64_t, uint64_t>>>) {
      p_.list(m.size(), [&](size_t i) {
        const std::pair<uint64_t, uint64_t>& t = m[i];  // (pointer, bytes)
        p_.list(2, [&](size_t k) { p_.unsigned_integer(k ? t.second : t.first); });
      });
    } else if constexpr (requires { m.has_value(); }) {
      object(*m);
    } else if constexpr (requires { m.size(); }) {
      p_.list(m.size(), [&](size_t i) { object(m[i]); });
    } else {
      object(m);
    }
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

}  // namespace cumemtrace::snap
