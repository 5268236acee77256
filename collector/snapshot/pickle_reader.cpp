#include "snapshot/pickle_reader.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "snapshot/snapshot_reader.h"

namespace cumemtrace::snap {

namespace {

using nlohmann::json;

// One unpickled value in 8 bytes: a 3-bit tag and a 61-bit payload. Small integers are held
// inline; wider numbers and floats in a side table; strings are views into the input (which
// outlives the decode); lists and dicts are container indices, so a memoized object fetched again
// is the same object, a pickle that makes a list contain itself leaks nothing, and a million
// nested lists free without recursion. A real snapshot is mostly small dicts of small integers,
// so this is most of the memory a pickle costs.
class Value {
 public:
  enum Tag : uint8_t { kUnset, kNone, kBool, kInt, kWide, kStr, kList, kDict };
  Value() = default;
  static Value make(Tag t, uint64_t payload) {
    Value v;
    v.bits_ = payload << 3 | t;
    return v;
  }
  static bool fits(int64_t i) { return i >= -(int64_t{1} << 60) && i < (int64_t{1} << 60); }
  static Value small(int64_t i) {
    Value v;
    v.bits_ = static_cast<uint64_t>(i) << 3 | kInt;
    return v;
  }
  Tag tag() const { return static_cast<Tag>(bits_ & 7); }
  uint64_t payload() const { return bits_ >> 3; }
  int64_t small_int() const { return static_cast<int64_t>(bits_) >> 3; }

 private:
  uint64_t bits_ = 0;
};
static_assert(sizeof(Value) == 8);

struct Wide {  // a number that does not fit a Value
  enum Kind : uint8_t { kInt, kUint, kFloat } kind;
  union {
    int64_t i;
    uint64_t u;
    double d;
  };
};

// A list's or dict's items (dicts: key, value, key, value...) are runs of one shared arena: each
// APPENDS/SETITEMS batch is one run (or extends the last one), so a small dict costs its items
// and 32 bytes, with no allocation of its own.
constexpr uint32_t kNoRun = UINT32_MAX;
struct Container {
  uint64_t offset = 0;  // where the pickle built it, for messages
  uint32_t first = kNoRun, last = kNoRun;
};
struct Run {
  uint64_t start = 0;
  uint32_t count = 0;
  uint32_t next = kNoRun;
};

class Unpickler {
 public:
  Unpickler(std::string_view b, const std::string& name)
      : b_(b), name_(name), budget_(16 * b.size() + (1u << 20)) {}

  // Runs the pickle to STOP; returns the top value. One case per opcode, each a few lines: the
  // switch is the opcode table, read top to bottom (longer than 120 lines on purpose).
  Value run() {
    while (true) {
      const size_t at = pos_;
      const auto op = static_cast<unsigned char>(take(1)[0]);
      switch (op) {
        case 0x80: {  // PROTO
          const auto v = static_cast<unsigned char>(take(1)[0]);
          if (v < 2 || v > 5) fail(at, "unsupported protocol " + std::to_string(v));
          break;
        }
        case 0x95:
          take(8);
          break;     // FRAME: framing is only a read-ahead hint
        case '.': {  // STOP
          if (stack_.size() != 1 || !marks_.empty()) fail(at, "STOP with an unbalanced stack");
          stop_ = at;
          return stack_.back();
        }
        case '(':
          marks_.push_back(stack_.size());
          break;
        case '}':
          stack_.push_back(make_container(Value::kDict, at));
          break;
        case ']':
        case ')':  // tuples become lists, as in JSON
          stack_.push_back(make_container(Value::kList, at));
          break;
        case 'N':
          stack_.push_back(Value::make(Value::kNone, 0));
          break;
        case 0x88:
        case 0x89:
          stack_.push_back(Value::make(Value::kBool, op == 0x88));
          break;
        case 'K':
          push_int(static_cast<int64_t>(le(take(1))));
          break;
        case 'M':
          push_int(static_cast<int64_t>(le(take(2))));
          break;
        case 'J':
          push_int(static_cast<int32_t>(le(take(4))));
          break;
        case 0x8a:
          long_int(at, static_cast<unsigned char>(take(1)[0]));
          break;
        case 0x8b:
          long_int(at, le(take(4)));
          break;
        case 'G': {
          const auto raw = take(8);  // big endian on the wire, unlike every other number
          uint64_t bits = 0;
          for (char c : raw) bits = (bits << 8) | static_cast<unsigned char>(c);
          Wide w{Wide::kFloat, {}};
          w.d = std::bit_cast<double>(bits);
          push_wide(w);
          break;
        }
        case 0x8c:
          str(take(static_cast<unsigned char>(take(1)[0])));
          break;
        case 'X':
          str(take(le(take(4))));
          break;
        case 0x8d:
          str(take(le(take(8))));
          break;
        case 0x94:
          put(memo_count_, top(at));
          break;
        case 'q':
          put(le(take(1)), top(at));
          break;
        case 'r':
          put(le(take(4)), top(at));
          break;
        case 'h':
          get(at, le(take(1)));
          break;
        case 'j':
          get(at, le(take(4)));
          break;
        case 's':  // SETITEM
          need(at, 3);
          set_items(at, stack_[stack_.size() - 3], stack_.size() - 2);
          break;
        case 'u': {  // SETITEMS
          const size_t m = pop_mark(at);
          if ((stack_.size() - m) % 2) fail(at, "SETITEMS with an odd item count");
          if (m == 0 || (!marks_.empty() && m - 1 < marks_.back())) fail(at, "stack underflow");
          set_items(at, stack_[m - 1], m);
          break;
        }
        case 'd': {  // DICT
          const size_t m = pop_mark(at);
          if ((stack_.size() - m) % 2) fail(at, "DICT with an odd item count");
          const Value d = make_container(Value::kDict, at);
          set_items(at, d, m);
          stack_.push_back(d);
          break;
        }
        case 'a':  // APPEND
          need(at, 2);
          append(at, stack_[stack_.size() - 2], stack_.size() - 1);
          break;
        case 'e': {  // APPENDS
          const size_t m = pop_mark(at);
          if (m == 0 || (!marks_.empty() && m - 1 < marks_.back())) fail(at, "stack underflow");
          append(at, stack_[m - 1], m);
          break;
        }
        case 'l':    // LIST
        case 't': {  // TUPLE
          const size_t m = pop_mark(at);
          const Value l = make_container(Value::kList, at);
          append(at, l, m);
          stack_.push_back(l);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          const size_t n = op - 0x84u;
          need(at, n);
          const Value t = make_container(Value::kList, at);
          append(at, t, stack_.size() - n);
          stack_.push_back(t);
          break;
        }
        default:
          fail(at,
               "unsupported opcode 0x" + fmt::format("{:02x}", op) + " (not plain snapshot data)");
      }
      if (stack_.size() > kMaxStack) fail(at, "stack too deep");
    }
  }

  // Streams `v` into a sink with the SnapshotBuilder's event interface.
  template <typename Sink>
  void emit(Sink& sink, Value v, int depth) {
    if (depth > 64) fail(stop_, "objects nested deeper than 64 (a cycle?)");
    const size_t cost = 1 + (v.tag() == Value::kStr ? strings_[v.payload()].size() / 64 : 0);
    if (cost > budget_)
      fail(stop_, "shared objects expand to more than 16 times the pickle's size");
    budget_ -= cost;
    switch (v.tag()) {
      case Value::kUnset:
      case Value::kNone:
        return sink.null();
      case Value::kBool:
        return sink.boolean(v.payload() != 0);
      case Value::kInt:
        return sink.integer(v.small_int());
      case Value::kWide: {
        const Wide& w = wide_[v.payload()];
        if (w.kind == Wide::kInt) return sink.integer(w.i);
        if (w.kind == Wide::kUint) return sink.unsigned_integer(w.u);
        return sink.floating(w.d);
      }
      case Value::kStr:
        return sink.string(strings_[v.payload()]);
      case Value::kList: {
        const auto idx = static_cast<uint32_t>(v.payload());
        const Container& c = containers_[idx];
        const bool frames = sink.frames_next();
        if (frames) {
          if (auto it = frames_.find(idx); it != frames_.end()) return sink.reuse_stack(it->second);
        }
        sink.at(c.offset);
        sink.start_array();
        for (uint32_t r = c.first; r != kNoRun; r = runs_[r].next)
          for (uint64_t i = runs_[r].start; i < runs_[r].start + runs_[r].count; ++i)
            emit(sink, item(i), depth + 1);
        sink.at(c.offset);
        sink.end_array();
        if (frames) frames_.emplace(idx, sink.last_stack());
        return;
      }
      case Value::kDict: {
        const Container& c = containers_[v.payload()];
        sink.at(c.offset);
        sink.start_object();
        bool is_key = true;
        for (uint32_t r = c.first; r != kNoRun; r = runs_[r].next) {
          for (uint64_t i = runs_[r].start; i < runs_[r].start + runs_[r].count; ++i) {
            if (is_key) {
              sink.at(c.offset);
              sink.key(strings_[item(i).payload()]);
            } else {
              emit(sink, item(i), depth + 1);
            }
            is_key = !is_key;
          }
        }
        sink.at(c.offset);
        sink.end_object();
        return;
      }
    }
  }

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw snap::ReadError(fmt::format("{}: pickle offset {}: {}", name_, at, what));
  }

 private:
  static constexpr size_t kMaxStack = 1 << 20;
  static constexpr unsigned kChunkBits = 20;  // arena chunks of 1 Mi values (8 MiB)
  static constexpr uint64_t kChunk = uint64_t{1} << kChunkBits;

  Value make_container(Value::Tag t, size_t at) {
    if (containers_.size() >= UINT32_MAX - 1) fail(at, "too many objects");
    containers_.push_back(Container{at, kNoRun, kNoRun});
    return Value::make(t, containers_.size() - 1);
  }
  void push_int(int64_t i) {
    if (Value::fits(i)) return stack_.push_back(Value::small(i));
    Wide w{Wide::kInt, {}};
    w.i = i;
    push_wide(w);
  }
  void push_wide(const Wide& w) {
    wide_.push_back(w);
    stack_.push_back(Value::make(Value::kWide, wide_.size() - 1));
  }
  Value item(uint64_t i) const { return chunks_[i >> kChunkBits][i & (kChunk - 1)]; }
  // Moves stack_[from...] to the end of container c's items (extending its last run when that
  // ends where the arena does) and pops them.
  void add_items(size_t at, Container& c, size_t from) {
    for (size_t k = from; k < stack_.size(); ++k) {
      if (c.last == kNoRun || runs_[c.last].start + runs_[c.last].count != size_ ||
          runs_[c.last].count == UINT32_MAX) {
        if (runs_.size() >= UINT32_MAX - 1) fail(at, "too many objects");
        runs_.push_back(Run{size_, 0, kNoRun});
        const auto r = static_cast<uint32_t>(runs_.size() - 1);
        if (c.last == kNoRun) {
          c.first = r;
        } else {
          runs_[c.last].next = r;
        }
        c.last = r;
      }
      if (size_ == chunks_.size() * kChunk) chunks_.push_back(std::make_unique<Value[]>(kChunk));
      chunks_[size_ >> kChunkBits][size_ & (kChunk - 1)] = stack_[k];
      ++size_;
      ++runs_[c.last].count;
    }
    stack_.resize(from);
  }

  std::string_view take(uint64_t n) {
    if (n > b_.size() - pos_) fail(pos_, "truncated");
    auto s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  static uint64_t le(std::string_view s) {
    uint64_t v = 0;
    for (size_t i = 0; i < s.size(); ++i)
      v |= uint64_t{static_cast<unsigned char>(s[i])} << (8 * i);
    return v;
  }
  void long_int(size_t at, uint64_t n) {
    const auto s = take(n);
    if (n == 0) return push_int(0);
    const bool negative = static_cast<unsigned char>(s[n - 1]) & 0x80;
    // Beyond 64 bits only sign-extension bytes may follow.
    for (size_t i = 8; i < n; ++i)
      if (static_cast<unsigned char>(s[i]) != (negative ? 0xff : 0x00))
        fail(at, "integer wider than 64 bits");
    uint64_t v = le(s.substr(0, std::min<uint64_t>(n, 8)));
    if (negative) {
      if (n < 8) v |= ~uint64_t{0} << (8 * n);
      push_int(static_cast<int64_t>(v));
    } else if (v > static_cast<uint64_t>(INT64_MAX)) {
      Wide w{Wide::kUint, {}};
      w.u = v;
      push_wide(w);
    } else {
      push_int(static_cast<int64_t>(v));
    }
  }
  void str(std::string_view s) {
    strings_.push_back(s);
    stack_.push_back(Value::make(Value::kStr, strings_.size() - 1));
  }
  Value top(size_t at) const {
    if (stack_.empty()) fail(at, "memo of an empty stack");
    return stack_.back();
  }
  // Python numbers memo entries densely from 0 (MEMOIZE uses the count so far); other ids go to
  // a map, so a hostile id costs no huge vector.
  void put(uint64_t id, Value v) {
    if (id < memo_.size()) {
      if (memo_[id].tag() == Value::kUnset) ++memo_count_;
      memo_[id] = v;
    } else if (id == memo_.size() && !memo_sparse_.count(id)) {
      memo_.push_back(v);
      ++memo_count_;
    } else if (memo_sparse_.insert_or_assign(id, v).second) {
      ++memo_count_;
    }
  }
  void get(size_t at, uint64_t id) {
    if (id < memo_.size() && memo_[id].tag() != Value::kUnset) return stack_.push_back(memo_[id]);
    auto it = memo_sparse_.find(id);
    if (it == memo_sparse_.end()) fail(at, "memo " + std::to_string(id) + " unset");
    stack_.push_back(it->second);
  }
  void need(size_t at, size_t n) const {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) fail(at, "stack underflow");
  }
  // Pops the innermost MARK and returns where its items start on the stack.
  size_t pop_mark(size_t at) {
    if (marks_.empty()) fail(at, "no MARK");
    const size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }
  // stack_[from...] are key, value pairs for dict d; they are moved into it.
  void set_items(size_t at, Value d, size_t from) {
    if (d.tag() != Value::kDict) fail(at, "SETITEM on a non-dict");
    for (size_t k = from; k < stack_.size(); k += 2)
      if (stack_[k].tag() != Value::kStr) fail(at, "dict key is not a string");
    add_items(at, containers_[d.payload()], from);
  }
  void append(size_t at, Value l, size_t from) {
    if (l.tag() != Value::kList) fail(at, "APPEND on a non-list");
    add_items(at, containers_[l.payload()], from);
  }

  std::string_view b_;
  const std::string& name_;
  size_t pos_ = 0;
  size_t stop_ = 0;
  size_t budget_;
  std::vector<std::string_view> strings_;
  std::vector<Wide> wide_;
  std::vector<Container> containers_;
  std::vector<Run> runs_;
  std::vector<std::unique_ptr<Value[]>> chunks_;  // the items arena
  uint64_t size_ = 0;                             // values in the arena
  std::vector<Value> stack_;
  std::vector<size_t> marks_;
  std::vector<Value> memo_;
  std::unordered_map<uint64_t, Value> memo_sparse_;
  uint64_t memo_count_ = 0;
  std::unordered_map<uint32_t, int32_t> frames_;  // frames list (container) -> interned stack
};

// Builds JSON from the same events, for unpickle(). Dict keys repeat as in Python: the last wins.
class JsonSink {
 public:
  void at(uint64_t) {}
  bool frames_next() const { return false; }
  void reuse_stack(int32_t) {}
  int32_t last_stack() const { return snap::kNoStack; }
  void null() { value(nullptr); }
  void boolean(bool b) { value(b); }
  void integer(int64_t i) { value(i); }
  void unsigned_integer(uint64_t u) { value(u); }
  void floating(double d) { value(d); }
  void string(std::string_view s) { value(std::string(s)); }
  void start_object() { open(json::object()); }
  void start_array() { open(json::array()); }
  void key(std::string_view k) { key_ = std::string(k); }
  void end_object() { stack_.pop_back(); }
  void end_array() { stack_.pop_back(); }
  json take() { return std::move(root_); }

 private:
  json& slot() {
    if (stack_.empty()) return root_;
    json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(nullptr);
      return parent.back();
    }
    return parent[key_];
  }
  void value(json v) { slot() = std::move(v); }
  void open(json v) {
    json& s = slot();
    s = std::move(v);
    stack_.push_back(&s);
  }
  json root_;
  std::vector<json*> stack_;
  std::string key_;
};

}  // namespace

bool looks_like_pickle(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x80 &&
         static_cast<unsigned char>(bytes[1]) >= 2 && static_cast<unsigned char>(bytes[1]) <= 5;
}

snap::Snapshot read_pickle_snapshot(std::string_view bytes, const std::string& name) {
  try {
    Unpickler u(bytes, name);
    const Value top = u.run();
    if (top.tag() != Value::kDict) u.fail(0, "expected a dict at top level (a memory snapshot)");
    snap::SnapshotBuilder b(name);
    u.emit(b, top, 0);
    return b.finish();
  } catch (const std::bad_alloc&) {
    throw snap::ReadError(fmt::format("{}: expected a snapshot that fits in memory", name));
  }
}

json unpickle(std::string_view bytes) {
  static const std::string kName = "pickle";
  Unpickler u(bytes, kName);
  const Value top = u.run();
  JsonSink sink;
  u.emit(sink, top, 0);
  return sink.take();
}

}  // namespace cumemtrace::snap
