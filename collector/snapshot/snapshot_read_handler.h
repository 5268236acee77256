// Contract: the strict reader's model builder (internal to collector/snapshot/): a SAX handler
// that turns JSON events into a snap::Snapshot and enforces the rules snapshot_reader.h states.
// One Level per open object or array says what it is. PyTorch's own objects (segments, blocks,
// frames, trace entries) have key tables here and are read in snapshot_read_pytorch.cpp; every
// object described in snapshot_fields.h (the tool section, annotations) is read from that table
// in snapshot_read_tool.cpp. The core (levels, values, errors, stacks) is snapshot_reader.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "snapshot/read_error.h"
#include "snapshot/snapshot.h"
#include "snapshot/snapshot_fields.h"

namespace cumemtrace::snap::detail {

using json = nlohmann::json;
using Keys = std::vector<std::string_view>;

enum class C : uint8_t {
  kRoot,
  kSegments,
  kSegment,
  kPoolId,
  kBlocks,
  kBlock,
  kFrames,
  kFrame,
  kTraces,
  kTrace,
  kEntry,
  kSettings,
  kCapture,
  kObject,   // an object described in snapshot_fields.h (Level::kind, Level::target)
  kObjects,  // an array of them (Level::target: the vector)
  kStrings,  // an array of strings (Level::target: the vector)
  kStrMap,   // an object of strings (Level::target: the map)
  kPairs,    // an array of [pointer, bytes] pairs (Level::target: the vector)
  kPair,     // one pair (Level::target: the pair)
  kSkip,
};

// Key tables of PyTorch's objects, one X-list per object kind: the list gives both the enum the
// dispatch switches on (by name) and the table keys are looked up in (a key's id is its bit in
// Level::seen), so the two cannot drift apart.
#define CT_ENUM(k) k,
#define CT_NAME(k) #k,
// clang-format off
#define ROOT_KEYS(X) \
  X(segments) X(device_traces) X(allocator_settings) X(external_annotations) X(cumemtrace)
#define SEGMENT_KEYS(X) \
  X(device) X(address) X(total_size) X(allocated_size) X(active_size) X(requested_size) \
  X(stream) X(segment_type) X(segment_pool_id) X(is_expandable) X(frames) X(blocks) X(source)
#define BLOCK_KEYS(X) X(address) X(size) X(requested_size) X(state) X(frames)
#define FRAME_KEYS(X) X(filename) X(line) X(name) X(module)
#define ENTRY_KEYS(X) \
  X(action) X(addr) X(size) X(stream) X(time_us) X(tid) X(frames) X(device_free) \
  X(stream_per_thread) X(source) X(async_pool) X(category)
// clang-format on
#define CT_KEYS(Enum, table, LIST)         \
  enum class Enum : int { LIST(CT_ENUM) }; \
  inline const Keys table = {LIST(CT_NAME)};
CT_KEYS(RootKey, kRootKeys, ROOT_KEYS)
CT_KEYS(SegKey, kSegmentKeys, SEGMENT_KEYS)
CT_KEYS(BlockKey, kBlockKeys, BLOCK_KEYS)
CT_KEYS(FrameKey, kFrameKeys, FRAME_KEYS)
CT_KEYS(EntryKey, kEntryKeys, ENTRY_KEYS)
#undef CT_KEYS

template <typename... E>
uint32_t bits(E... keys) {
  return ((1u << static_cast<int>(keys)) | ... | 0u);
}
inline uint32_t all_bits(const Keys& k) {
  return k.size() >= 32 ? ~0u : (1u << k.size()) - 1;
}

class Handler;
struct Val {
  enum Kind { kNull, kBool, kInt, kUint, kFloat, kString } kind;
  bool b = false;
  int64_t i = 0;
  uint64_t u = 0;
  std::string* s = nullptr;
};

// A type described in snapshot_fields.h, as the reader sees it (built from the table once).
struct ObjKind {
  Keys keys;
  uint32_t required = 0;
  std::string_view element_error;  // a scalar where one of these objects belongs
  void (Handler::*scalar)(void* obj, int key, const Val& v);
  void (Handler::*start)(void* obj, int key, bool object, std::string_view key_name);
  void (*set_stack)(void* obj, int32_t idx);  // its frames field
  void* (*emplace)(void* vec);                // a new element of a std::vector of them
};
const ObjKind& tool_kind();
const ObjKind& annotation_kind();
const ObjKind& context_kind();

struct Level {
  C c = C::kSkip;
  int key = -1;                   // id of the key being read (objects)
  uint32_t seen = 0;              // keys read so far (objects)
  uint64_t index = 0;             // elements read so far (arrays)
  std::string_view key_name;      // the key under which this level sits in its parent, for messages
  const ObjKind* kind = nullptr;  // kObject, kObjects: the described type
  void* target = nullptr;         // what the level fills (see C)
};

class Handler {
 public:
  Handler(const std::string& name, const char* begin) : name_(name), begin_(begin), pos_(begin) {}

  const char** pos_slot() { return &pos_; }
  Snapshot take();

  // For event sources that are not JSON text (SnapshotBuilder): where errors are reported, and
  // frame lists the source knows to be the same object as one read before.
  void set_offset(uint64_t off) { base_ = off; }
  void use_stack(int32_t idx) { assign_stack(stack_.back(), idx); }
  int32_t last_stack() const { return last_stack_; }

  // --- nlohmann SAX interface -------------------------------------------------------------
  bool null() { return scalar(Val{Val::kNull}); }
  bool boolean(bool b) {
    Val v{Val::kBool};
    v.b = b;
    return scalar(v);
  }
  bool number_integer(json::number_integer_t i) {
    Val v{Val::kInt};
    v.i = i;
    return scalar(v);
  }
  bool number_unsigned(json::number_unsigned_t u) {
    Val v{Val::kUint};
    v.u = u;
    return scalar(v);
  }
  bool number_float(json::number_float_t, const std::string& s) {
    Val v{Val::kFloat};
    v.s = const_cast<std::string*>(&s);
    return scalar(v);
  }
  bool string(std::string& s) {
    Val v{Val::kString};
    v.s = &s;
    return scalar(v);
  }
  bool binary(json::binary_t&) { fail("expected JSON text, not binary data"); }
  bool start_object(std::size_t) { return start(true); }
  bool start_array(std::size_t) { return start(false); }
  bool end_object() { return end(); }
  bool end_array() { return end(); }
  bool key(std::string& k);
  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& ex);

  // Fast path for repeated stacks (a program allocates from few call paths): the scanner asks,
  // before parsing an array, whether it is a "frames" list, and offers its raw text; text seen
  // before maps straight to its interned stack without parsing the frames again.
  bool frames_next() const;
  bool reuse_frames(std::string_view raw);

  // Read from the tables of snapshot_fields.h (snapshot_read_tool.cpp).
  template <typename O>
  void described_scalar(void* obj, int key, const Val& v);
  template <typename O>
  void described_start(void* obj, int key, bool object, std::string_view key_name);

 private:
  static std::string json_text(const std::string& s);
  static std::string printable(std::string_view s);
  static const Keys* keys_of(const Level& l);
  static uint32_t required_of(const Level& l);
  std::string where() const;
  uint64_t offset() const { return base_ + static_cast<uint64_t>(pos_ - begin_); }
  [[noreturn]] void fail(std::string_view expected) const;
  [[noreturn]] void fail_plain(std::string_view msg) const;

  // Values, checked: the one place each limit and its message live.
  uint64_t u64(const Val& v) const;
  int64_t i64(const Val& v) const;
  int device(const Val& v) const;
  int small_int(const Val& v) const;
  uint32_t tid(const Val& v) const;
  std::string str(const Val& v) const;
  bool boolean_of(const Val& v) const;
  Source source_of(const Val& v) const;
  std::string scalar_text(const Val& v, bool as_json) const;

  bool scalar(const Val& v);
  void field(Level& l, const Val& v);
  bool start(bool object);
  bool start_container(Level& l, bool object);
  bool end();
  void push(C c, std::string_view key_name, const ObjKind* kind = nullptr, void* target = nullptr);
  void need(bool object, bool want_object) const {
    if (object != want_object) fail(want_object ? "expected an object" : "expected an array");
  }
  void capture_sep() {
    if (capture_comma_) capture_ += ',';
  }

  // PyTorch's objects (snapshot_read_pytorch.cpp).
  void root_field(const Level& l);
  void segment_field(const Level& l, const Val& v);
  void block_field(const Level& l, const Val& v);
  void frame_field(const Level& l, const Val& v);
  void entry_field(const Level& l, const Val& v);
  bool root_start(const Level& l, bool object, std::string_view kn);
  void entry_end(const Level& l);

  // One field of a described object (snapshot_read_tool.cpp).
  template <typename M>
  void set_field(const fields::Field& f, M& m, const Val& v);
  template <typename M>
  void open_field(const fields::Field& f, M& m, bool object, std::string_view key_name);

  void assign_stack(Level& owner, int32_t idx);
  int32_t intern();
  void check_required(const Level& l);

  const std::string& name_;
  const char* begin_;
  const char* pos_;
  uint64_t base_ = 0;
  int32_t last_stack_ = kNoStack;
  Snapshot snap_;
  std::vector<Level> stack_;
  Segment seg_;
  Block block_;
  Stack frames_;  // slots for the frame list being read; the first nframes_ are filled
  size_t nframes_ = 0;
  TraceEntry entry_;
  std::string cur_key_;
  std::string capture_;
  bool capture_comma_ = false;
  std::string capture_kinds_;
  std::unordered_map<size_t, int32_t> interned_;
  std::unordered_map<std::string_view, int32_t> raw_frames_;  // views into the input text
  std::string_view pending_raw_;
  std::vector<int32_t> interned_next_;
};

}  // namespace cumemtrace::snap::detail
