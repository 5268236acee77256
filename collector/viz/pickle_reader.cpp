#include "viz/pickle_reader.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <new>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "snapshot_reader.h"

namespace cumemtrace::viz {

namespace {

using nlohmann::json;

// One unpickled value. Scalars are held inline; strings are views into the input (which outlives
// the decode); lists and dicts are indices into one arena, so a memoized object fetched again is
// the same object, a pickle that makes a list contain itself leaks nothing, and a million nested
// lists free without recursion.
struct Value {
  enum Kind : uint8_t { kUnset, kNone, kBool, kInt, kUint, kFloat, kStr, kList, kDict };
  Kind kind = kUnset;
  uint32_t idx = 0;  // kStr: strings_; kList/kDict: containers_; kBool: 0 or 1
  union {
    int64_t i;
    uint64_t u;
    double d;
  };
  Value() : u(0) {}
};
static_assert(sizeof(Value) == 16);

struct Container {
  std::vector<Value> items;  // dicts: key, value, key, value...
  uint64_t offset = 0;       // where the pickle built it, for messages
};

class Unpickler {
 public:
  Unpickler(std::string_view b, const std::string& name)
      : b_(b), name_(name), budget_(16 * b.size() + (1u << 20)) {}

  // Runs the pickle to STOP; returns the top value.
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
          stack_.push_back(scalar(Value::kNone));
          break;
        case 0x88:
        case 0x89: {
          Value v = scalar(Value::kBool);
          v.idx = op == 0x88;
          stack_.push_back(v);
          break;
        }
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
          Value v = scalar(Value::kFloat);
          v.d = std::bit_cast<double>(bits);
          stack_.push_back(v);
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
          put(at, memo_count_, top(at));
          break;
        case 'q':
          put(at, le(take(1)), top(at));
          break;
        case 'r':
          put(at, le(take(4)), top(at));
          break;
        case 'h':
          get(at, le(take(1)));
          break;
        case 'j':
          get(at, le(take(4)));
          break;
        case 's': {  // SETITEM
          need(at, 3);
          Value v = pop(), k = pop();
          set_item(at, stack_.back(), k, v);
          break;
        }
        case 'u': {  // SETITEMS
          const size_t m = pop_mark(at);
          if ((stack_.size() - m) % 2) fail(at, "SETITEMS with an odd item count");
          if (m == 0 || (!marks_.empty() && m - 1 < marks_.back())) fail(at, "stack underflow");
          const Value d = stack_[m - 1];
          for (size_t i = m; i < stack_.size(); i += 2) set_item(at, d, stack_[i], stack_[i + 1]);
          stack_.resize(m);
          break;
        }
        case 'd': {  // DICT
          const size_t m = pop_mark(at);
          if ((stack_.size() - m) % 2) fail(at, "DICT with an odd item count");
          const Value d = make_container(Value::kDict, at);
          for (size_t i = m; i < stack_.size(); i += 2) set_item(at, d, stack_[i], stack_[i + 1]);
          stack_.resize(m);
          stack_.push_back(d);
          break;
        }
        case 'a': {  // APPEND
          need(at, 2);
          Value v = pop();
          append(at, stack_.back(), v);
          break;
        }
        case 'e': {  // APPENDS
          const size_t m = pop_mark(at);
          if (m == 0 || (!marks_.empty() && m - 1 < marks_.back())) fail(at, "stack underflow");
          const Value l = stack_[m - 1];
          for (size_t i = m; i < stack_.size(); ++i) append(at, l, stack_[i]);
          stack_.resize(m);
          break;
        }
        case 'l':    // LIST
        case 't': {  // TUPLE
          const size_t m = pop_mark(at);
          const Value l = make_container(Value::kList, at);
          containers_[l.idx].items.assign(stack_.begin() + static_cast<ptrdiff_t>(m), stack_.end());
          stack_.resize(m);
          stack_.push_back(l);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          const size_t n = op - 0x84u;
          need(at, n);
          const Value t = make_container(Value::kList, at);
          containers_[t.idx].items.assign(stack_.end() - static_cast<ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
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
  void emit(Sink& sink, const Value& v, int depth) {
    if (depth > 64) fail(stop_, "objects nested deeper than 64 (a cycle?)");
    const size_t cost = 1 + (v.kind == Value::kStr ? strings_[v.idx].size() / 64 : 0);
    if (cost > budget_)
      fail(stop_, "shared objects expand to more than 16 times the pickle's size");
    budget_ -= cost;
    switch (v.kind) {
      case Value::kUnset:
      case Value::kNone:
        return sink.null();
      case Value::kBool:
        return sink.boolean(v.idx != 0);
      case Value::kInt:
        return sink.integer(v.i);
      case Value::kUint:
        return sink.unsigned_integer(v.u);
      case Value::kFloat:
        return sink.floating(v.d);
      case Value::kStr:
        return sink.string(strings_[v.idx]);
      case Value::kList: {
        const Container& c = containers_[v.idx];
        const bool frames = sink.frames_next();
        if (frames) {
          if (auto it = frames_.find(v.idx); it != frames_.end())
            return sink.reuse_stack(it->second);
        }
        sink.at(c.offset);
        sink.start_array();
        for (size_t i = 0; i < c.items.size(); ++i) emit(sink, c.items[i], depth + 1);
        sink.at(c.offset);
        sink.end_array();
        if (frames) frames_.emplace(v.idx, sink.last_stack());
        return;
      }
      case Value::kDict: {
        const Container& c = containers_[v.idx];
        sink.at(c.offset);
        sink.start_object();
        for (size_t i = 0; i + 1 < c.items.size(); i += 2) {
          sink.at(c.offset);
          sink.key(strings_[c.items[i].idx]);
          emit(sink, c.items[i + 1], depth + 1);
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

  static Value scalar(Value::Kind k) {
    Value v;
    v.kind = k;
    return v;
  }
  Value make_container(Value::Kind k, size_t at) {
    if (containers_.size() >= UINT32_MAX) fail(at, "too many objects");
    containers_.emplace_back();
    containers_.back().offset = at;
    Value v = scalar(k);
    v.idx = static_cast<uint32_t>(containers_.size() - 1);
    return v;
  }
  void push_int(int64_t i) {
    Value v = scalar(Value::kInt);
    v.i = i;
    stack_.push_back(v);
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
      Value u = scalar(Value::kUint);
      u.u = v;
      stack_.push_back(u);
    } else {
      push_int(static_cast<int64_t>(v));
    }
  }
  void str(std::string_view s) {
    if (strings_.size() >= UINT32_MAX) fail(pos_, "too many objects");
    Value v = scalar(Value::kStr);
    v.idx = static_cast<uint32_t>(strings_.size());
    strings_.push_back(s);
    stack_.push_back(v);
  }
  const Value& top(size_t at) {
    if (stack_.empty()) fail(at, "memo of an empty stack");
    return stack_.back();
  }
  // Python numbers memo entries densely from 0 (MEMOIZE uses the count so far); explicit ids
  // elsewhere go to a map, so a hostile id costs no huge vector.
  void put(size_t at, uint64_t id, const Value& v) {
    (void)at;
    if (id < memo_.size()) {
      if (memo_[id].kind == Value::kUnset) ++memo_count_;
      memo_[id] = v;
    } else if (id == memo_.size() && !memo_sparse_.count(id)) {
      memo_.push_back(v);
      ++memo_count_;
    } else {
      auto [it, inserted] = memo_sparse_.insert_or_assign(id, v);
      (void)it;
      if (inserted) ++memo_count_;
    }
  }
  void get(size_t at, uint64_t id) {
    if (id < memo_.size() && memo_[id].kind != Value::kUnset) return stack_.push_back(memo_[id]);
    auto it = memo_sparse_.find(id);
    if (it == memo_sparse_.end()) fail(at, "memo " + std::to_string(id) + " unset");
    stack_.push_back(it->second);
  }
  void need(size_t at, size_t n) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) fail(at, "stack underflow");
  }
  Value pop() {
    const Value v = stack_.back();
    stack_.pop_back();
    return v;
  }
  // Pops the innermost MARK and returns where its items start on the stack.
  size_t pop_mark(size_t at) {
    if (marks_.empty()) fail(at, "no MARK");
    const size_t m = marks_.back();
    marks_.pop_back();
    return m;
  }
  void set_item(size_t at, const Value& d, const Value& k, const Value& v) {
    if (d.kind != Value::kDict) fail(at, "SETITEM on a non-dict");
    if (k.kind != Value::kStr) fail(at, "dict key is not a string");
    auto& items = containers_[d.idx].items;
    items.push_back(k);
    items.push_back(v);
  }
  void append(size_t at, const Value& l, const Value& v) {
    if (l.kind != Value::kList) fail(at, "APPEND on a non-list");
    containers_[l.idx].items.push_back(v);
  }

  std::string_view b_;
  const std::string& name_;
  size_t pos_ = 0;
  size_t stop_ = 0;
  size_t budget_;
  std::vector<std::string_view> strings_;
  std::vector<Container> containers_;
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
    if (top.kind != Value::kDict) u.fail(0, "expected a dict at top level (a memory snapshot)");
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

}  // namespace cumemtrace::viz
