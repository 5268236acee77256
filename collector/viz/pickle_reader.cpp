#include "viz/pickle_reader.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace cumemtrace::viz {

namespace {

using nlohmann::json;

// Pickle objects are shared by reference (a memoized list is filled after it is memoized and
// fetched again later), so they are built as a graph first and copied into JSON at the end. The
// nodes live in one arena and refer to each other by index: a pickle that makes a list contain
// itself, or nests a million lists, costs no leaked cycle and no recursive destruction.
using Ref = uint32_t;
struct Node {
  json scalar;  // used unless list or dict
  bool is_list = false;
  bool is_dict = false;
  std::vector<Ref> items;
  std::vector<std::pair<std::string, Ref>> entries;
};

class Unpickler {
 public:
  // Copying shared objects may multiply the input (PyTorch's own pickles stay under one JSON
  // element per byte); a pickle that shares objects exponentially is refused, not expanded.
  explicit Unpickler(std::string_view b) : b_(b), budget_(16 * b.size() + (1u << 20)) {}

  json run() {
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
          return to_json(at, stack_.back(), 0);
        }
        case '(':
          marks_.push_back(stack_.size());
          break;
        case '}':
          stack_.push_back(make_dict());
          break;
        case ']':
          stack_.push_back(make_list());
          break;
        case ')':
          stack_.push_back(make_list());
          break;  // tuples become lists, as in JSON
        case 'N':
          stack_.push_back(make_scalar(nullptr));
          break;
        case 0x88:
          stack_.push_back(make_scalar(true));
          break;
        case 0x89:
          stack_.push_back(make_scalar(false));
          break;
        case 'K':
          stack_.push_back(make_scalar(le(take(1))));
          break;
        case 'M':
          stack_.push_back(make_scalar(le(take(2))));
          break;
        case 'J':
          stack_.push_back(make_scalar(static_cast<int32_t>(le(take(4)))));
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
          stack_.push_back(make_scalar(std::bit_cast<double>(bits)));
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
          memo_[memo_.size()] = top(at);
          break;
        case 'q':
          memo_[le(take(1))] = top(at);
          break;
        case 'r':
          memo_[le(take(4))] = top(at);
          break;
        case 'h':
          get(at, le(take(1)));
          break;
        case 'j':
          get(at, le(take(4)));
          break;
        case 's': {  // SETITEM
          need(at, 3);
          Ref v = pop(), k = pop();
          set_item(at, stack_.back(), k, v);
          break;
        }
        case 'u': {  // SETITEMS
          auto items = pop_mark(at);
          if (items.size() % 2) fail(at, "SETITEMS with an odd item count");
          need(at, 1);
          for (size_t i = 0; i < items.size(); i += 2)
            set_item(at, stack_.back(), items[i], items[i + 1]);
          break;
        }
        case 'd': {  // DICT
          auto items = pop_mark(at);
          if (items.size() % 2) fail(at, "DICT with an odd item count");
          Ref d = make_dict();
          for (size_t i = 0; i < items.size(); i += 2) set_item(at, d, items[i], items[i + 1]);
          stack_.push_back(d);
          break;
        }
        case 'a': {  // APPEND
          need(at, 2);
          Ref v = pop();
          append(at, stack_.back(), v);
          break;
        }
        case 'e': {  // APPENDS
          auto items = pop_mark(at);
          need(at, 1);
          for (Ref v : items) append(at, stack_.back(), v);
          break;
        }
        case 'l':    // LIST
        case 't': {  // TUPLE
          auto items = pop_mark(at);
          Ref l = make_list();
          nodes_[l].items = std::move(items);
          stack_.push_back(l);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          const size_t n = op - 0x84u;
          need(at, n);
          Ref t = make_list();
          nodes_[t].items.assign(stack_.end() - static_cast<ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          stack_.push_back(t);
          break;
        }
        default:
          fail(at, "unsupported opcode 0x" + hex(op) + " (not plain snapshot data)");
      }
      if (stack_.size() > kMaxStack) fail(at, "stack too deep");
    }
  }

 private:
  static constexpr size_t kMaxStack = 1 << 20;

  Ref add(Node n) {
    if (nodes_.size() >= UINT32_MAX) fail(pos_, "too many objects");
    nodes_.push_back(std::move(n));
    return static_cast<Ref>(nodes_.size() - 1);
  }
  Ref make_scalar(json v) {
    Node n;
    n.scalar = std::move(v);
    return add(std::move(n));
  }
  Ref make_list() {
    Node n;
    n.is_list = true;
    return add(std::move(n));
  }
  Ref make_dict() {
    Node n;
    n.is_dict = true;
    return add(std::move(n));
  }

  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw std::runtime_error("pickle offset " + std::to_string(at) + ": " + what);
  }
  static std::string hex(unsigned v) {
    static constexpr char kDigits[] = "0123456789abcdef";
    return {kDigits[(v >> 4) & 0xf], kDigits[v & 0xf]};
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
    if (n == 0) return void(stack_.push_back(make_scalar(0)));
    const bool negative = static_cast<unsigned char>(s[n - 1]) & 0x80;
    // Beyond 64 bits only sign-extension bytes may follow.
    for (size_t i = 8; i < n; ++i)
      if (static_cast<unsigned char>(s[i]) != (negative ? 0xff : 0x00))
        fail(at, "integer wider than 64 bits");
    uint64_t v = le(s.substr(0, std::min<uint64_t>(n, 8)));
    if (negative) {
      if (n < 8) v |= ~uint64_t{0} << (8 * n);
      stack_.push_back(make_scalar(static_cast<int64_t>(v)));
    } else {
      stack_.push_back(make_scalar(v));
    }
  }
  void str(std::string_view s) { stack_.push_back(make_scalar(std::string(s))); }
  Ref& top(size_t at) {
    if (stack_.empty()) fail(at, "memo of an empty stack");
    return stack_.back();
  }
  void get(size_t at, uint64_t id) {
    auto it = memo_.find(id);
    if (it == memo_.end()) fail(at, "memo " + std::to_string(id) + " unset");
    stack_.push_back(it->second);
  }
  void need(size_t at, size_t n) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) fail(at, "stack underflow");
  }
  Ref pop() {
    const Ref v = stack_.back();
    stack_.pop_back();
    return v;
  }
  std::vector<Ref> pop_mark(size_t at) {
    if (marks_.empty()) fail(at, "no MARK");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Ref> items(stack_.begin() + static_cast<ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  void set_item(size_t at, Ref d, Ref k, Ref v) {
    const Node& key = nodes_[k];
    if (!nodes_[d].is_dict) fail(at, "SETITEM on a non-dict");
    if (key.is_list || key.is_dict || !key.scalar.is_string()) fail(at, "dict key is not a string");
    std::string name = key.scalar.get<std::string>();
    nodes_[d].entries.emplace_back(std::move(name), v);
  }
  void append(size_t at, Ref l, Ref v) {
    if (!nodes_[l].is_list) fail(at, "APPEND on a non-list");
    nodes_[l].items.push_back(v);
  }
  // Depth-limited, so a self-referencing pickle is an error instead of endless recursion.
  json to_json(size_t at, Ref r, int depth) {
    if (depth > 64) fail(at, "objects nested deeper than 64 (a cycle?)");
    const Node& n = nodes_[r];
    const size_t text = n.scalar.is_string() ? n.scalar.get_ref<const std::string&>().size() : 0;
    const size_t cost = 1 + text / 64;
    if (cost > budget_) fail(at, "shared objects expand to more than 16 times the pickle's size");
    budget_ -= cost;
    if (n.is_list) {
      json a = json::array();
      for (const Ref i : n.items) a.push_back(to_json(at, i, depth + 1));
      return a;
    }
    if (n.is_dict) {
      json o = json::object();
      for (const auto& [k, v] : n.entries) o[k] = to_json(at, v, depth + 1);
      return o;
    }
    return n.scalar;
  }

  std::string_view b_;
  size_t pos_ = 0;
  size_t budget_;
  std::vector<Node> nodes_;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Ref> memo_;
};

}  // namespace

bool looks_like_pickle(std::string_view bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x80 &&
         static_cast<unsigned char>(bytes[1]) >= 2 && static_cast<unsigned char>(bytes[1]) <= 5;
}

json unpickle(std::string_view bytes) {
  return Unpickler(bytes).run();
}

}  // namespace cumemtrace::viz
