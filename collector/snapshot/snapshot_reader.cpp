// The strict reader's core: the SAX handler's levels, values and errors, interned stacks, and
// the public entry points (read_snapshot, read_snapshot_reference, SnapshotBuilder). What each
// object holds is read in snapshot_read_pytorch.cpp (PyTorch's objects) and
// snapshot_read_tool.cpp (the objects snapshot_fields.h describes).
#include "snapshot/snapshot_reader.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <limits>
#include <new>

#include <fmt/format.h>

#include "snapshot/json_scanner.h"
#include "snapshot/snapshot_read_handler.h"

namespace cumemtrace::snap {

namespace detail {

namespace {

// Largest integer every JSON reader (JavaScript's memory_viz included) holds exactly.
constexpr uint64_t kMaxExact = (uint64_t{1} << 53) - 1;
// Device ordinals index per-device vectors in the analysis; a corrupt ordinal must not turn into
// a gigantic allocation.
constexpr uint64_t kMaxDevice = 4095;
constexpr size_t kMaxDepth = 512;

size_t hash_frames(const Frame* f, size_t n) {
  size_t h = n;
  for (size_t i = 0; i < n; ++i) {
    h = h * 1000003u ^ std::hash<std::string>{}(f[i].name);
    h = h * 1000003u ^ std::hash<std::string>{}(f[i].filename);
    h = h * 1000003u ^ std::hash<int64_t>{}(f[i].line);
  }
  return h;
}

}  // namespace

Snapshot Handler::take() {
  // PyTorch's own files (no tool section) hold nothing but PyTorch's view.
  if (!snap_.tool) {
    for (auto& g : snap_.segments) g.source = Source::kPytorch;
    for (auto& tr : snap_.device_traces)
      for (auto& e : tr) e.source = Source::kPytorch;
  }
  return std::move(snap_);
}

const Keys* Handler::keys_of(const Level& l) {
  switch (l.c) {
    case C::kRoot:
      return &kRootKeys;
    case C::kSegment:
      return &kSegmentKeys;
    case C::kBlock:
      return &kBlockKeys;
    case C::kFrame:
      return &kFrameKeys;
    case C::kEntry:
      return &kEntryKeys;
    case C::kObject:
      return &l.kind->keys;
    default:
      return nullptr;
  }
}

uint32_t Handler::required_of(const Level& l) {
  switch (l.c) {
    case C::kRoot:
      return bits(RootKey::segments, RootKey::device_traces);
    case C::kSegment:
      return bits(SegKey::device, SegKey::address, SegKey::total_size, SegKey::blocks);
    case C::kBlock:
      return bits(BlockKey::address, BlockKey::size, BlockKey::state);
    case C::kEntry:
      return bits(EntryKey::action, EntryKey::size);
    case C::kFrame:
      return bits(FrameKey::filename, FrameKey::line, FrameKey::name);
    case C::kObject:
      return l.kind->required;
    default:
      return 0;
  }
}

bool Handler::frames_next() const {
  if (stack_.empty()) return false;
  const Level& l = stack_.back();
  const Keys* k = keys_of(l);
  return k && l.key >= 0 && (*k)[static_cast<size_t>(l.key)] == "frames";
}

bool Handler::reuse_frames(std::string_view raw) {
  auto it = raw_frames_.find(raw);
  if (it == raw_frames_.end()) {
    pending_raw_ = raw;
    return false;
  }
  assign_stack(stack_.back(), it->second);
  return true;
}

bool Handler::key(std::string& k) {
  Level& l = stack_.back();
  if (l.c == C::kCapture) {
    capture_sep();
    capture_ += json_text(k);
    capture_ += ':';
    capture_comma_ = false;
    return true;
  }
  if (l.c == C::kSkip) return true;
  if (l.c == C::kSettings || l.c == C::kStrMap) {
    cur_key_ = k;
    l.key_name = {};
    return true;
  }
  const Keys* keys = keys_of(l);
  l.key = -1;
  for (size_t i = 0; i < keys->size(); ++i) {
    if ((*keys)[i] == k) {
      l.key = static_cast<int>(i);
      l.seen |= 1u << i;
      break;
    }
  }
  return true;
}

bool Handler::parse_error(std::size_t position, const std::string& last_token,
                          const nlohmann::detail::exception& ex) {
  // nlohmann's message: "[json.exception.parse_error.101] parse error at line 1, column 2:
  // syntax error while parsing value - invalid literal; last read: 'x'". Keep what follows
  // the location, without the raw token (it may be binary).
  std::string what = ex.what();
  if (auto c = what.find(": "); c != std::string::npos) what = what.substr(c + 2);
  if (auto lr = what.find("; last read:"); lr != std::string::npos) what.resize(lr);
  (void)last_token;
  size_t off = position > 0 ? position - 1 : 0;
  throw ReadError(fmt::format("{}:offset {}: invalid JSON ({})", name_, off, printable(what)));
}

// A string as JSON text. The scanner only passes valid UTF-8, but the pickle reader passes
// whatever bytes the pickle held: those become U+FFFD, as the writer does, instead of throwing.
std::string Handler::json_text(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string Handler::printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f) {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  return out;
}

std::string Handler::where() const {
  std::string p;
  for (size_t d = 1; d < stack_.size(); ++d) {
    const Level& parent = stack_[d - 1];
    if (parent.c == C::kRoot || keys_of(parent) != nullptr) {
      if (!p.empty()) p += '.';
      p += stack_[d].key_name;
    } else {
      p += fmt::format("[{}]", parent.index);
    }
  }
  // The value being read sits below the top level.
  const Level& top = stack_.back();
  if (keys_of(top) && top.key >= 0) {
    if (!p.empty()) p += '.';
    p += (*keys_of(top))[top.key];
  } else if (keys_of(top) == nullptr && top.c != C::kRoot) {
    p += fmt::format("[{}]", top.index);
  }
  return p.empty() ? "top level" : p;
}

void Handler::fail(std::string_view expected) const {
  throw ReadError(fmt::format("{}:offset {}: {} at {}", name_, offset(), expected, where()));
}
void Handler::fail_plain(std::string_view msg) const {
  throw ReadError(fmt::format("{}:offset {}: {}", name_, offset(), msg));
}

uint64_t Handler::u64(const Val& v) const {
  if (v.kind == Val::kUint || (v.kind == Val::kInt && v.i >= 0)) {
    uint64_t u = v.kind == Val::kUint ? v.u : static_cast<uint64_t>(v.i);
    if (u > kMaxExact) fail("expected an integer at most 2^53-1");
    return u;
  }
  fail("expected a non-negative integer");
}
int64_t Handler::i64(const Val& v) const {
  if (v.kind == Val::kInt) {
    if (v.i < -static_cast<int64_t>(kMaxExact)) fail("expected an integer at least -(2^53-1)");
    return v.i;
  }
  return static_cast<int64_t>(u64(v));
}
int Handler::device(const Val& v) const {
  uint64_t u = u64(v);
  if (u > kMaxDevice) fail("expected a device ordinal below 4096");
  return static_cast<int>(u);
}
int Handler::small_int(const Val& v) const {
  int64_t i = i64(v);
  if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max())
    fail("expected a 32-bit integer");
  return static_cast<int>(i);
}
uint32_t Handler::tid(const Val& v) const {
  const uint64_t t = u64(v);
  if (t > std::numeric_limits<uint32_t>::max()) fail("expected a thread id below 2^32");
  return static_cast<uint32_t>(t);
}
std::string Handler::str(const Val& v) const {
  if (v.kind != Val::kString) fail("expected a string");
  return std::move(*v.s);
}
bool Handler::boolean_of(const Val& v) const {
  if (v.kind != Val::kBool) fail("expected true or false");
  return v.b;
}
Source Handler::source_of(const Val& v) const {
  if (v.kind != Val::kString) fail("expected a string");
  if (*v.s == "pytorch") return Source::kPytorch;
  if (*v.s == "driver") return Source::kDriver;
  if (*v.s == "graph") return Source::kGraph;
  fail("expected source \"pytorch\", \"graph\" or \"driver\"");
}

std::string Handler::scalar_text(const Val& v, bool as_json) const {
  switch (v.kind) {
    case Val::kNull:
      return "null";
    case Val::kBool:
      return v.b ? "true" : "false";
    case Val::kInt:
      return std::to_string(v.i);
    case Val::kUint:
      return std::to_string(v.u);
    case Val::kFloat:
      return *v.s;
    case Val::kString:
      return as_json ? json_text(*v.s) : *v.s;
  }
  return {};
}

namespace {
std::string_view expected_element(const Level& l) {
  switch (l.c) {
    case C::kSegments:
      return "expected a segment object";
    case C::kBlocks:
      return "expected a block object";
    case C::kFrames:
      return "expected a frame object";
    case C::kTraces:
      return "expected an array of trace entries";
    case C::kTrace:
      return "expected a trace entry object";
    case C::kObjects:
      return l.kind->element_error;
    case C::kPairs:
      return "expected a [pointer, bytes] pair";
    default:
      return "unexpected value";
  }
}
}  // namespace

bool Handler::scalar(const Val& v) {
  if (stack_.empty()) fail_plain("expected a JSON object at top level");
  Level& l = stack_.back();
  switch (l.c) {
    case C::kSkip:
      return true;
    case C::kCapture:
      capture_sep();
      capture_ += scalar_text(v, true);
      capture_comma_ = true;
      return true;
    case C::kSettings:
      snap_.allocator_settings[cur_key_] = scalar_text(v, false);
      return true;
    case C::kStrMap:
      (*static_cast<std::map<std::string, std::string>*>(l.target))[cur_key_] = str(v);
      return true;
    case C::kStrings:
      static_cast<std::vector<std::string>*>(l.target)->push_back(str(v));
      ++l.index;
      return true;
    case C::kPoolId:
      if (i64(v) != 0) seg_.private_pool = true;
      ++l.index;
      return true;
    case C::kPair: {
      if (l.index >= 2) fail("expected a [pointer, bytes] pair");
      auto& pair = *static_cast<std::pair<uint64_t, uint64_t>*>(l.target);
      (l.index == 0 ? pair.first : pair.second) = u64(v);
      ++l.index;
      return true;
    }
    default:
      break;
  }
  if (keys_of(l) == nullptr) fail(expected_element(l));
  if (l.key < 0) return true;  // unknown key: ignored
  field(l, v);
  return true;
}

void Handler::field(Level& l, const Val& v) {
  switch (l.c) {
    case C::kRoot:
      return root_field(l);
    case C::kSegment:
      return segment_field(l, v);
    case C::kBlock:
      return block_field(l, v);
    case C::kFrame:
      return frame_field(l, v);
    case C::kEntry:
      return entry_field(l, v);
    case C::kObject:
      return (this->*l.kind->scalar)(l.target, l.key, v);
    default:
      return;
  }
}

void Handler::push(C c, std::string_view key_name, const ObjKind* kind, void* target) {
  if (stack_.size() >= kMaxDepth) fail_plain("expected JSON nested at most 512 levels deep");
  Level l;
  l.c = c;
  l.key_name = key_name;
  l.kind = kind;
  l.target = target;
  stack_.push_back(l);
}

bool Handler::start(bool object) {
  if (stack_.empty()) {
    if (!object) fail_plain("expected a JSON object at top level");
    push(C::kRoot, {});
    return true;
  }
  Level& l = stack_.back();
  if (start_container(l, object)) return true;
  if (keys_of(l) == nullptr) fail("unexpected value");
  if (l.key < 0) {
    push(C::kSkip, {});
    return true;
  }
  const std::string_view kn = (*keys_of(l))[static_cast<size_t>(l.key)];
  if (kn == "frames") {
    need(object, false);
    nframes_ = 0;
    push(C::kFrames, kn);
    return true;
  }
  switch (l.c) {
    case C::kRoot:
      if (root_start(l, object, kn)) return true;
      break;
    case C::kSegment:
      if (static_cast<SegKey>(l.key) == SegKey::segment_pool_id) {
        need(object, false);
        push(C::kPoolId, kn);
        return true;
      }
      if (static_cast<SegKey>(l.key) == SegKey::blocks) {
        need(object, false);
        push(C::kBlocks, kn);
        return true;
      }
      break;
    case C::kObject:
      (this->*l.kind->start)(l.target, l.key, object, kn);
      return true;
    default:
      break;
  }
  const bool string_key =
      (l.c == C::kSegment && (static_cast<SegKey>(l.key) == SegKey::segment_type ||
                              static_cast<SegKey>(l.key) == SegKey::source)) ||
      (l.c == C::kEntry && static_cast<EntryKey>(l.key) == EntryKey::source);
  fail(string_key ? "expected a string" : "expected a number or string");
}

// An object or array opening inside an array or a captured value: what the array holds.
// false when the level is an object (its key decides).
bool Handler::start_container(Level& l, bool object) {
  switch (l.c) {
    case C::kSkip:
      push(C::kSkip, {});
      return true;
    case C::kCapture:
      capture_sep();
      capture_ += object ? '{' : '[';
      capture_comma_ = false;
      capture_kinds_.push_back(object ? '}' : ']');
      push(C::kCapture, {});
      return true;
    case C::kSettings:
      // A nested setting (PyTorch's roundup_power2_divisions) is kept as its JSON text.
      capture_.assign(1, object ? '{' : '[');
      capture_comma_ = false;
      capture_kinds_.assign(1, object ? '}' : ']');
      push(C::kCapture, cur_key_);
      return true;
    case C::kSegments:
      need(object, true);
      seg_ = Segment{};
      push(C::kSegment, {});
      return true;
    case C::kBlocks:
      need(object, true);
      block_ = Block{};
      push(C::kBlock, {});
      return true;
    case C::kFrames:
      need(object, true);
      // Frame slots are reused across stacks so their strings keep their capacity.
      if (nframes_ == frames_.size()) frames_.emplace_back();
      frames_[nframes_].filename.clear();
      frames_[nframes_].name.clear();
      frames_[nframes_].line = 0;
      frames_[nframes_].module.clear();
      push(C::kFrame, {});
      return true;
    case C::kTraces:
      need(object, false);
      snap_.device_traces.emplace_back();
      push(C::kTrace, {});
      return true;
    case C::kTrace:
      need(object, true);
      entry_ = TraceEntry{};
      push(C::kEntry, {});
      return true;
    case C::kObjects: {
      need(object, true);
      const ObjKind* kind = l.kind;
      push(C::kObject, {}, kind, kind->emplace(l.target));
      return true;
    }
    case C::kPairs: {
      if (object) fail("expected a [pointer, bytes] pair");
      auto& pairs = *static_cast<std::vector<std::pair<uint64_t, uint64_t>>*>(l.target);
      push(C::kPair, {}, nullptr, &pairs.emplace_back(0, 0));
      return true;
    }
    case C::kPair:
    case C::kPoolId:
      fail("expected an integer");
    case C::kStrings:
    case C::kStrMap:
      fail("expected a string");
    default:
      return false;
  }
}

// Identical frame lists share one Snapshot::stacks entry: hash -> first index, chained
// through interned_next_ on collisions.
void Handler::assign_stack(Level& owner, int32_t idx) {
  switch (owner.c) {
    case C::kSegment:
      seg_.stack = idx;
      break;
    case C::kBlock:
      block_.stack = idx;
      break;
    case C::kEntry:
      entry_.stack = idx;
      break;
    case C::kObject:
      owner.kind->set_stack(owner.target, idx);
      break;
    default:
      break;
  }
}

int32_t Handler::intern() {
  if (nframes_ == 0) return kNoStack;
  const Frame* f = frames_.data();
  const size_t h = hash_frames(f, nframes_);
  auto [it, inserted] = interned_.try_emplace(h, kNoStack);
  for (int32_t i = it->second; i != kNoStack; i = interned_next_[static_cast<size_t>(i)]) {
    const Stack& st = snap_.stacks[static_cast<size_t>(i)];
    if (st.size() == nframes_ && std::equal(st.begin(), st.end(), f)) return i;
  }
  if (snap_.stacks.size() >= static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    fail("expected fewer distinct stacks");
  const auto idx = static_cast<int32_t>(snap_.stacks.size());
  snap_.stacks.emplace_back(f, f + nframes_);
  interned_next_.push_back(it->second);
  it->second = idx;
  return idx;
}

void Handler::check_required(const Level& l) {
  uint32_t missing = required_of(l) & ~l.seen;
  if (!missing) return;
  const Keys* keys = keys_of(l);
  for (size_t i = 0; i < keys->size(); ++i) {
    if (missing & (1u << i)) fail(fmt::format("expected key \"{}\"", (*keys)[i]));
  }
}

bool Handler::end() {
  Level l = stack_.back();
  if (keys_of(l)) {
    stack_.back().key = -1;  // a missing key is reported at the object, not its last key
    check_required(l);
  }
  stack_.pop_back();
  if (stack_.empty()) return true;
  Level& parent = stack_.back();
  ++parent.index;
  switch (l.c) {
    case C::kCapture:
      capture_ += capture_kinds_.back();
      capture_kinds_.pop_back();
      capture_comma_ = true;
      if (parent.c == C::kSettings) snap_.allocator_settings[cur_key_] = capture_;
      break;
    case C::kFrame:
      ++nframes_;
      break;
    case C::kFrames: {
      const int32_t idx = intern();
      last_stack_ = idx;
      assign_stack(parent, idx);
      // Remember the raw text only when the parse consumed exactly what the bracket scan saw.
      if (!pending_raw_.empty() && pos_ == pending_raw_.data() + pending_raw_.size())
        raw_frames_.emplace(pending_raw_, idx);
      pending_raw_ = {};
      break;
    }
    case C::kBlock:
      seg_.blocks.push_back(std::move(block_));
      break;
    case C::kSegment:
      snap_.segments.push_back(std::move(seg_));
      break;
    case C::kEntry:
      entry_end(l);
      break;
    case C::kObject:
      if (l.kind == &context_kind()) {
        const auto& c = *static_cast<const ContextMemory*>(l.target);
        if (c.end_time_us && c.end_time_us < c.time_us)
          fail_plain(
              fmt::format("a context ends before it begins at contexts[{}]", parent.index - 1));
      }
      break;
    case C::kPoolId:
      if (l.index != 2) fail("expected segment_pool_id to be a pair of integers");
      break;
    case C::kPair:
      if (l.index != 2) fail("expected a [pointer, bytes] pair");
      break;
    default:
      break;
  }
  return true;
}

}  // namespace detail

namespace {

using detail::Handler;
using detail::json;

struct TrackedIt {
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  const char* p = nullptr;
  const char** pos = nullptr;
  reference operator*() const { return *p; }
  TrackedIt& operator++() {
    ++p;
    *pos = p;
    return *this;
  }
  TrackedIt operator++(int) {
    TrackedIt t = *this;
    ++*this;
    return t;
  }
  bool operator==(const TrackedIt& o) const { return p == o.p; }
};

}  // namespace

Snapshot read_snapshot(std::string_view text, const std::string& name) {
  Handler h(name, text.data());
  try {
    detail::Scanner<Handler>(text, name, h, h.pos_slot()).run();
  } catch (const std::bad_alloc&) {
    throw ReadError(fmt::format("{}:offset 0: expected a snapshot that fits in memory", name));
  }
  return h.take();
}

Snapshot read_snapshot_reference(std::string_view text, const std::string& name) {
  // nlohmann's lexer reads a NUL byte as the end of the input, so "{...}\0garbage" would pass.
  // RFC 8259 has no place for a raw NUL (the scanner rejects it wherever it is).
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw ReadError(fmt::format("{}:offset {}: invalid JSON (a NUL byte)", name, nul));
  }
  Handler h(name, text.data());
  TrackedIt first{text.data(), h.pos_slot()};
  TrackedIt last{text.data() + text.size(), h.pos_slot()};
  try {
    json::sax_parse(first, last, &h);
  } catch (const ReadError&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw ReadError(fmt::format("{}:offset 0: expected a snapshot that fits in memory", name));
  } catch (const std::exception& e) {
    // nlohmann reports some limits (e.g. numbers it cannot hold) by exception.
    throw ReadError(fmt::format("{}: expected valid JSON ({})", name, e.what()));
  }
  return h.take();
}

struct SnapshotBuilder::Impl {
  explicit Impl(std::string n) : name(std::move(n)), h(name, nullptr) {}
  std::string name;
  Handler h;
  std::string scratch;  // the handler takes strings it may move from
};

SnapshotBuilder::SnapshotBuilder(std::string name)
    : impl_(std::make_unique<Impl>(std::move(name))) {}
SnapshotBuilder::~SnapshotBuilder() = default;

void SnapshotBuilder::at(uint64_t offset) {
  impl_->h.set_offset(offset);
}
void SnapshotBuilder::null() {
  impl_->h.null();
}
void SnapshotBuilder::boolean(bool b) {
  impl_->h.boolean(b);
}
void SnapshotBuilder::integer(int64_t i) {
  if (i >= 0) {
    impl_->h.number_unsigned(static_cast<uint64_t>(i));
  } else {
    impl_->h.number_integer(i);
  }
}
void SnapshotBuilder::unsigned_integer(uint64_t u) {
  impl_->h.number_unsigned(u);
}
void SnapshotBuilder::floating(double d) {
  impl_->scratch = fmt::format("{}", d);
  impl_->h.number_float(d, impl_->scratch);
}
void SnapshotBuilder::string(std::string_view s) {
  impl_->scratch.assign(s);
  impl_->h.string(impl_->scratch);
}
void SnapshotBuilder::start_object() {
  impl_->h.start_object(std::size_t(-1));
}
void SnapshotBuilder::key(std::string_view k) {
  impl_->scratch.assign(k);
  impl_->h.key(impl_->scratch);
}
void SnapshotBuilder::end_object() {
  impl_->h.end_object();
}
void SnapshotBuilder::start_array() {
  impl_->h.start_array(std::size_t(-1));
}
void SnapshotBuilder::end_array() {
  impl_->h.end_array();
}
bool SnapshotBuilder::frames_next() const {
  return impl_->h.frames_next();
}
void SnapshotBuilder::reuse_stack(int32_t stack) {
  impl_->h.use_stack(stack);
}
int32_t SnapshotBuilder::last_stack() const {
  return impl_->h.last_stack();
}
Snapshot SnapshotBuilder::finish() {
  return impl_->h.take();
}

}  // namespace cumemtrace::snap
