#include "snapshot/snapshot_reader.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <limits>
#include <new>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/input_file.h"

namespace cumemtrace::snap {

namespace {

using json = nlohmann::json;

// Largest integer every JSON reader (JavaScript's memory_viz included) holds exactly.
constexpr uint64_t kMaxExact = (uint64_t{1} << 53) - 1;
// Device ordinals index per-device vectors in the analysis; a corrupt ordinal must not turn into
// a gigantic allocation.
constexpr uint64_t kMaxDevice = 4095;
constexpr size_t kMaxDepth = 512;

// Wraps the input pointer so the handler knows how far the lexer got: nlohmann's SAX callbacks
// carry no position, and error messages must say where.
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

size_t hash_frames(const Frame* f, size_t n) {
  size_t h = n;
  for (size_t i = 0; i < n; ++i) {
    h = h * 1000003u ^ std::hash<std::string>{}(f[i].name);
    h = h * 1000003u ^ std::hash<std::string>{}(f[i].filename);
    h = h * 1000003u ^ std::hash<int64_t>{}(f[i].line);
  }
  return h;
}

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
  kAnnotations,
  kAnnotation,
  kTool,
  kArgv,
  kStrMap,
  kEnded,
  kDevices,
  kDevice,
  kVmms,
  kVmm,
  kImps,
  kImp,
  kHosts,
  kHost,
  kAnoms,
  kAnom,
  kDrivers,
  kDriver,
  kPools,
  kPool,
  kContexts,
  kContext,
  kPytorch,
  kOwners,        // ownership: the walks
  kOwner,         // one walk
  kOwnerTensors,  // its tensors: [pointer, bytes] pairs
  kOwnerPair,
  kSkip,
};

using Keys = std::vector<std::string_view>;

// Key tables, one X-list per object kind: the list gives both the enum the dispatch below
// switches on (by name) and the table the handler looks keys up in (a key's id is its bit in
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
#define FRAME_KEYS(X) X(filename) X(line) X(name)
#define ENTRY_KEYS(X) \
  X(action) X(addr) X(size) X(stream) X(time_us) X(tid) X(frames) X(device_free) \
  X(stream_per_thread) X(source) X(async_pool) X(category)
#define ANNOTATION_KEYS(X) X(name) X(stage) X(device) X(time_us)
#define TOOL_KEYS(X) \
  X(schema_version) X(tool_version) X(pid) X(ppid) X(exe) X(argv) X(hostname) X(rank) \
  X(start_time_us) X(end_time_us) X(reason) X(ended) X(events_total) X(events_dropped) \
  X(devices) X(vmm_handles) X(host_allocations) X(anomalies) X(threads) \
  X(trace_entries_dropped) X(driver_memory) X(tag) X(imported_mappings) X(ring_error) \
  X(pytorch) X(pool_memory) X(contexts) X(time_resolution_ns) X(ownership)
#define ENDED_KEYS(X) X(how) X(code) X(signal)
#define DEVICE_KEYS(X) \
  X(device) X(peak_bytes) X(peak_time_us) X(live_bytes) X(allocations) X(frees) \
  X(graph_reserved_bytes) X(graph_reserved_peak_bytes)
#define VMM_KEYS(X) X(handle) X(size) X(device) X(time_us) X(frames)
#define IMP_KEYS(X) X(addr) X(size) X(device) X(handle) X(time_us) X(frames)
#define HOST_KEYS(X) X(addr) X(size) X(api) X(time_us) X(frames)
#define ANOM_KEYS(X) X(kind) X(addr) X(api) X(time_us) X(tid) X(frames)
#define DRIVER_KEYS(X) X(time_us) X(device) X(used_bytes)
#define POOL_KEYS(X) X(time_us) X(device) X(pool) X(reserved_bytes) X(used_bytes)
#define CONTEXT_KEYS(X) X(device) X(bytes) X(time_us) X(end_time_us) X(api) X(handle)
#define PYTORCH_KEYS(X) X(version) X(backend) X(expandable_segments) X(capture) X(why)
#define OWNER_KEYS(X) X(time_us) X(role) X(tensors)
// clang-format on

#define CT_KEYS(Enum, table, LIST)         \
  enum class Enum : int { LIST(CT_ENUM) }; \
  const Keys table = {LIST(CT_NAME)};

CT_KEYS(RootKey, kRootKeys, ROOT_KEYS)
CT_KEYS(SegKey, kSegmentKeys, SEGMENT_KEYS)
CT_KEYS(BlockKey, kBlockKeys, BLOCK_KEYS)
CT_KEYS(FrameKey, kFrameKeys, FRAME_KEYS)
CT_KEYS(EntryKey, kEntryKeys, ENTRY_KEYS)
CT_KEYS(AnnKey, kAnnotationKeys, ANNOTATION_KEYS)
CT_KEYS(ToolKey, kToolKeys, TOOL_KEYS)
CT_KEYS(EndedKey, kEndedKeys, ENDED_KEYS)
CT_KEYS(DeviceKey, kDeviceKeys, DEVICE_KEYS)
CT_KEYS(VmmKey, kVmmKeys, VMM_KEYS)
CT_KEYS(ImpKey, kImpKeys, IMP_KEYS)
CT_KEYS(HostKey, kHostKeys, HOST_KEYS)
CT_KEYS(AnomKey, kAnomKeys, ANOM_KEYS)
CT_KEYS(DriverKey, kDriverKeys, DRIVER_KEYS)
CT_KEYS(PoolKey, kPoolKeys, POOL_KEYS)
CT_KEYS(CtxKey, kCtxKeys, CONTEXT_KEYS)
CT_KEYS(PytorchKey, kPytorchKeys, PYTORCH_KEYS)
CT_KEYS(OwnerKey, kOwnerKeys, OWNER_KEYS)

template <typename... E>
uint32_t bits(E... keys) {
  return ((1u << static_cast<int>(keys)) | ... | 0u);
}
uint32_t all_bits(const Keys& k) {
  return k.size() >= 32 ? ~0u : (1u << k.size()) - 1;
}

const Keys* keys_of(C c) {
  switch (c) {
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
    case C::kAnnotation:
      return &kAnnotationKeys;
    case C::kTool:
      return &kToolKeys;
    case C::kEnded:
      return &kEndedKeys;
    case C::kDevice:
      return &kDeviceKeys;
    case C::kVmm:
      return &kVmmKeys;
    case C::kImp:
      return &kImpKeys;
    case C::kHost:
      return &kHostKeys;
    case C::kAnom:
      return &kAnomKeys;
    case C::kDriver:
      return &kDriverKeys;
    case C::kPool:
      return &kPoolKeys;
    case C::kContext:
      return &kCtxKeys;
    case C::kPytorch:
      return &kPytorchKeys;
    case C::kOwner:
      return &kOwnerKeys;
    default:
      return nullptr;
  }
}

uint32_t required_of(C c) {
  switch (c) {
    case C::kRoot:
      return bits(RootKey::segments, RootKey::device_traces);
    case C::kSegment:
      return bits(SegKey::device, SegKey::address, SegKey::total_size, SegKey::blocks);
    case C::kBlock:
      return bits(BlockKey::address, BlockKey::size, BlockKey::state);
    case C::kEntry:
      return bits(EntryKey::action, EntryKey::size);
    case C::kTool:
      // Optional: tag (request/periodic snapshots), imported_mappings (absent before VMM import
      // support), ring_error (only when the ring was not read to its end), pytorch (only when
      // the target imported torch), pool_memory (only when the target used memory pools),
      // contexts (only when a context's cost was measured), time_resolution_ns (only for
      // --clock coarse), ownership (only with the automatic phases' ownership walks).
      return all_bits(kToolKeys) & ~bits(ToolKey::tag, ToolKey::imported_mappings,
                                         ToolKey::ring_error, ToolKey::pytorch,
                                         ToolKey::pool_memory, ToolKey::contexts,
                                         ToolKey::time_resolution_ns, ToolKey::ownership);
    case C::kContext:  // end_time_us: only once the context was destroyed
      return all_bits(kCtxKeys) & ~bits(CtxKey::end_time_us);
    case C::kDevice:  // graph_reserved_*: only where the process made graph memory nodes
      return all_bits(kDeviceKeys) &
             ~bits(DeviceKey::graph_reserved_bytes, DeviceKey::graph_reserved_peak_bytes);
    case C::kFrame:
    case C::kAnnotation:
    case C::kDriver:
    case C::kPool:
    case C::kEnded:
    case C::kVmm:
    case C::kImp:
    case C::kHost:
    case C::kAnom:
    case C::kPytorch:
    case C::kOwner:
      return all_bits(*keys_of(c));
    default:
      return 0;
  }
}

struct Level {
  C c = C::kSkip;
  int key = -1;               // id of the key being read (objects)
  uint32_t seen = 0;          // keys read so far (objects)
  uint64_t index = 0;         // elements read so far (arrays)
  std::string_view key_name;  // the key under which this level sits in its parent, for messages
  std::string* map_key = nullptr;
};

class Handler {
 public:
  Handler(const std::string& name, const char* begin) : name_(name), begin_(begin), pos_(begin) {}

  const char** pos_slot() { return &pos_; }
  Snapshot take() {
    // PyTorch's own files (no tool section) hold nothing but PyTorch's view.
    if (!snap_.tool) {
      for (auto& g : snap_.segments) g.source = Source::kPytorch;
      for (auto& tr : snap_.device_traces)
        for (auto& e : tr) e.source = Source::kPytorch;
    }
    return std::move(snap_);
  }

  // For event sources that are not JSON text (SnapshotBuilder): where errors are reported, and
  // frame lists the source knows to be the same object as one read before.
  void set_offset(uint64_t off) { base_ = off; }
  void use_stack(int32_t idx) { assign_stack(stack_.back().c, idx); }
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

  // Fast path for repeated stacks (a program allocates from few call paths): the scanner asks,
  // before parsing an array, whether it is a "frames" list, and offers its raw text; text seen
  // before maps straight to its interned stack without parsing the frames again.
  bool frames_next() const {
    if (stack_.empty()) return false;
    const Level& l = stack_.back();
    const Keys* k = keys_of(l.c);
    return k && l.key >= 0 && (*k)[static_cast<size_t>(l.key)] == "frames";
  }
  bool reuse_frames(std::string_view raw) {
    auto it = raw_frames_.find(raw);
    if (it == raw_frames_.end()) {
      pending_raw_ = raw;
      return false;
    }
    assign_stack(stack_.back().c, it->second);
    return true;
  }
  bool start_array(std::size_t) { return start(false); }
  bool end_object() { return end(); }
  bool end_array() { return end(); }
  bool key(std::string& k) {
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
    const Keys* keys = keys_of(l.c);
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
  bool parse_error(std::size_t position, const std::string& last_token,
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

 private:
  struct Val {
    enum Kind { kNull, kBool, kInt, kUint, kFloat, kString } kind;
    bool b = false;
    int64_t i = 0;
    uint64_t u = 0;
    std::string* s = nullptr;
  };

  // A string as JSON text. The scanner only passes valid UTF-8, but the pickle reader passes
  // whatever bytes the pickle held: those become U+FFFD, as the writer does, instead of throwing.
  static std::string json_text(const std::string& s) {
    return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
  }

  static std::string printable(std::string_view s) {
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

  std::string where() const {
    std::string p;
    for (size_t d = 1; d < stack_.size(); ++d) {
      const Level& parent = stack_[d - 1];
      if (parent.c == C::kRoot || keys_of(parent.c) != nullptr) {
        if (!p.empty()) p += '.';
        p += stack_[d].key_name;
      } else {
        p += fmt::format("[{}]", parent.index);
      }
    }
    // The value being read sits below the top level.
    const Level& top = stack_.back();
    if (keys_of(top.c) && top.key >= 0) {
      if (!p.empty()) p += '.';
      p += (*keys_of(top.c))[top.key];
    } else if (keys_of(top.c) == nullptr && top.c != C::kRoot) {
      p += fmt::format("[{}]", top.index);
    }
    return p.empty() ? "top level" : p;
  }

  uint64_t offset() const { return base_ + static_cast<uint64_t>(pos_ - begin_); }

  [[noreturn]] void fail(std::string_view expected) const {
    throw ReadError(fmt::format("{}:offset {}: {} at {}", name_, offset(), expected, where()));
  }
  [[noreturn]] void fail_plain(std::string_view msg) const {
    throw ReadError(fmt::format("{}:offset {}: {}", name_, offset(), msg));
  }

  uint64_t u64(const Val& v) const {
    if (v.kind == Val::kUint || (v.kind == Val::kInt && v.i >= 0)) {
      uint64_t u = v.kind == Val::kUint ? v.u : static_cast<uint64_t>(v.i);
      if (u > kMaxExact) fail("expected an integer at most 2^53-1");
      return u;
    }
    if (v.kind == Val::kInt) fail("expected a non-negative integer");
    fail("expected a non-negative integer");
  }
  int64_t i64(const Val& v) const {
    if (v.kind == Val::kInt) {
      if (v.i < -static_cast<int64_t>(kMaxExact)) fail("expected an integer at least -(2^53-1)");
      return v.i;
    }
    return static_cast<int64_t>(u64(v));
  }
  int device(const Val& v) const {
    uint64_t u = u64(v);
    if (u > kMaxDevice) fail("expected a device ordinal below 4096");
    return static_cast<int>(u);
  }
  int small_int(const Val& v) const {
    int64_t i = i64(v);
    if (i < std::numeric_limits<int>::min() || i > std::numeric_limits<int>::max())
      fail("expected a 32-bit integer");
    return static_cast<int>(i);
  }
  uint32_t tid(const Val& v) const {
    const uint64_t t = u64(v);
    if (t > std::numeric_limits<uint32_t>::max()) fail("expected a thread id below 2^32");
    return static_cast<uint32_t>(t);
  }
  std::string str(const Val& v) const {
    if (v.kind != Val::kString) fail("expected a string");
    return std::move(*v.s);
  }
  bool boolean_of(const Val& v) const {
    if (v.kind != Val::kBool) fail("expected true or false");
    return v.b;
  }

  void capture_sep() {
    if (capture_comma_) capture_ += ',';
  }

  bool scalar(const Val& v) {
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
        (*l.map_key == "rank" ? snap_.tool->rank : snap_.tool->threads)[cur_key_] = str(v);
        return true;
      case C::kArgv:
        snap_.tool->argv.push_back(str(v));
        ++l.index;
        return true;
      case C::kPoolId:
        i64(v);
        ++l.index;
        return true;
      case C::kOwnerPair: {
        if (l.index >= 2) fail("expected a [pointer, bytes] pair");
        auto& pair = snap_.tool->ownership.back().tensors.back();
        (l.index == 0 ? pair.first : pair.second) = u64(v);
        ++l.index;
        return true;
      }
      default:
        break;
    }
    if (keys_of(l.c) == nullptr) {
      fail(expected_element(l.c));
    }
    if (l.key < 0) return true;  // unknown key: ignored
    field(l, v);
    return true;
  }

  std::string scalar_text(const Val& v, bool as_json) const {
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

  static std::string_view expected_element(C c) {
    switch (c) {
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
      case C::kAnnotations:
        return "expected an annotation object";
      case C::kDevices:
      case C::kVmms:
      case C::kImps:
      case C::kHosts:
      case C::kAnoms:
      case C::kDrivers:
      case C::kPools:
      case C::kContexts:
      case C::kOwners:
        return "expected an object";
      case C::kOwnerTensors:
        return "expected a [pointer, bytes] pair";
      default:
        return "unexpected value";
    }
  }

  Source source_of(const Val& v) const {
    if (v.kind != Val::kString) fail("expected a string");
    if (*v.s == "pytorch") return Source::kPytorch;
    if (*v.s == "driver") return Source::kDriver;
    if (*v.s == "graph") return Source::kGraph;
    fail("expected source \"pytorch\", \"graph\" or \"driver\"");
  }

  void field(Level& l, const Val& v) {
    switch (l.c) {
      case C::kRoot:
        fail(static_cast<RootKey>(l.key) == RootKey::allocator_settings ||
                     static_cast<RootKey>(l.key) == RootKey::cumemtrace
                 ? "expected an object"
                 : "expected an array");
      case C::kSegment:
        switch (static_cast<SegKey>(l.key)) {
          case SegKey::device:
            seg_.device = device(v);
            return;
          case SegKey::address:
            seg_.address = u64(v);
            return;
          case SegKey::total_size:
            seg_.total_size = u64(v);
            return;
          case SegKey::allocated_size:
            seg_.allocated_size = u64(v);
            return;
          case SegKey::active_size:
            seg_.active_size = u64(v);
            return;
          case SegKey::requested_size:
            seg_.requested_size = u64(v);
            return;
          case SegKey::stream:
            seg_.stream = u64(v);
            return;
          case SegKey::segment_type:
            seg_.segment_type = str(v);
            return;
          case SegKey::is_expandable:
            seg_.is_expandable = boolean_of(v);
            return;
          case SegKey::source:
            seg_.source = source_of(v);
            return;
          case SegKey::segment_pool_id:
          case SegKey::frames:
          case SegKey::blocks:
            fail("expected an array");
        }
        return;
      case C::kBlock:
        switch (static_cast<BlockKey>(l.key)) {
          case BlockKey::address:
            block_.address = u64(v);
            return;
          case BlockKey::size:
            block_.size = u64(v);
            return;
          case BlockKey::requested_size:
            block_.requested_size = u64(v);
            return;
          case BlockKey::state:
            block_.state = str(v);
            if (block_.state != "active_allocated" && block_.state != "active_pending_free" &&
                block_.state != "inactive")
              fail("expected state active_allocated, active_pending_free or inactive");
            return;
          case BlockKey::frames:
            fail("expected an array");
        }
        return;
      case C::kFrame:
        switch (static_cast<FrameKey>(l.key)) {
          case FrameKey::filename:
            if (v.kind != Val::kString) fail("expected a string");
            frames_[nframes_].filename.assign(*v.s);
            return;
          case FrameKey::line:
            frames_[nframes_].line = i64(v);
            if (frames_[nframes_].line < 0) fail("expected a non-negative line number");
            return;
          case FrameKey::name:
            if (v.kind != Val::kString) fail("expected a string");
            frames_[nframes_].name.assign(*v.s);
            return;
        }
        return;
      case C::kEntry:
        switch (static_cast<EntryKey>(l.key)) {
          case EntryKey::action: {
            if (v.kind != Val::kString) fail("expected a string");
            auto a = parse_action(*v.s);
            if (!a) fail(fmt::format("expected a known action, not \"{}\"", printable(*v.s)));
            entry_.action = *a;
            return;
          }
          case EntryKey::addr:
            entry_.addr = u64(v);
            return;
          case EntryKey::size:
            entry_.size = u64(v);
            return;
          case EntryKey::stream:
            entry_.stream = u64(v);
            return;
          case EntryKey::time_us:
            entry_.time_us = static_cast<int64_t>(u64(v));
            return;
          case EntryKey::tid:
            entry_.tid = tid(v);
            return;
          case EntryKey::device_free:
            entry_.device_free = u64(v);
            return;
          case EntryKey::stream_per_thread:
            entry_.stream_per_thread = boolean_of(v);
            return;
          case EntryKey::source:
            entry_.source = source_of(v);
            return;
          case EntryKey::async_pool:
            entry_.async_pool = boolean_of(v);
            return;
          case EntryKey::category:
            // PyTorch's profiler-path files name categories of their own (PARAMETER, ...):
            // what is not one of ours is unknown, never an error.
            if (v.kind != Val::kString) fail("expected a string");
            entry_.category = parse_category(*v.s).value_or(Category::kUnknown);
            return;
          case EntryKey::frames:
            fail("expected an array");
        }
        return;
      case C::kAnnotation:
        switch (static_cast<AnnKey>(l.key)) {
          case AnnKey::name:
            ann_.name = str(v);
            return;
          case AnnKey::stage:
            ann_.stage = str(v);
            if (ann_.stage != "START" && ann_.stage != "END" && ann_.stage != "MARK")
              fail("expected stage START, END or MARK");
            return;
          case AnnKey::device:
            ann_.device = device(v);
            return;
          case AnnKey::time_us:
            ann_.time_us = static_cast<int64_t>(u64(v));
            return;
        }
        return;
      case C::kTool: {
        ToolSection& t = *snap_.tool;
        switch (static_cast<ToolKey>(l.key)) {
          case ToolKey::schema_version: {
            uint64_t ver = u64(v);
            if (ver != static_cast<uint64_t>(kSchemaVersion))
              fail_plain(fmt::format("unsupported schema_version {} (this cumemtrace reads {})",
                                     ver, kSchemaVersion));
            t.schema_version = kSchemaVersion;
            return;
          }
          case ToolKey::tool_version:
            t.tool_version = str(v);
            return;
          case ToolKey::pid:
            t.pid = small_int(v);
            return;
          case ToolKey::ppid:
            t.ppid = small_int(v);
            return;
          case ToolKey::exe:
            t.exe = str(v);
            return;
          case ToolKey::hostname:
            t.hostname = str(v);
            return;
          case ToolKey::start_time_us:
            t.start_time_us = static_cast<int64_t>(u64(v));
            return;
          case ToolKey::end_time_us:
            t.end_time_us = static_cast<int64_t>(u64(v));
            return;
          case ToolKey::reason:
            t.reason = str(v);
            return;
          case ToolKey::events_total:
            t.events_total = u64(v);
            return;
          case ToolKey::events_dropped:
            t.events_dropped = u64(v);
            return;
          case ToolKey::trace_entries_dropped:
            t.trace_entries_dropped = u64(v);
            return;
          case ToolKey::tag:
            t.tag = str(v);
            return;
          case ToolKey::ring_error:
            t.ring_error = str(v);
            return;
          case ToolKey::time_resolution_ns:
            t.time_resolution_ns = u64(v);
            return;
          case ToolKey::rank:
          case ToolKey::ended:
          case ToolKey::threads:
          case ToolKey::pytorch:
            fail("expected an object");
          case ToolKey::argv:
          case ToolKey::devices:
          case ToolKey::vmm_handles:
          case ToolKey::host_allocations:
          case ToolKey::anomalies:
          case ToolKey::driver_memory:
          case ToolKey::pool_memory:
          case ToolKey::contexts:
          case ToolKey::imported_mappings:
          case ToolKey::ownership:
            fail("expected an array");
        }
        return;
      }
      case C::kOwner: {
        OwnerWalk& w = snap_.tool->ownership.back();
        switch (static_cast<OwnerKey>(l.key)) {
          case OwnerKey::time_us:
            w.time_us = static_cast<int64_t>(u64(v));
            return;
          case OwnerKey::role: {
            if (v.kind != Val::kString) fail("expected a string");
            auto role = parse_owner_role(*v.s);
            if (!role) fail("expected role \"parameter\", \"gradient\" or \"optimizer_state\"");
            w.role = *role;
            return;
          }
          case OwnerKey::tensors:
            fail("expected an array");
        }
        return;
      }
      case C::kEnded:
        switch (static_cast<EndedKey>(l.key)) {
          case EndedKey::how:
            snap_.tool->ended.how = str(v);
            return;
          case EndedKey::code:
            snap_.tool->ended.code = small_int(v);
            return;
          case EndedKey::signal:
            snap_.tool->ended.signal = small_int(v);
            return;
        }
        return;
      case C::kPytorch: {
        PytorchInfo& p = *snap_.tool->pytorch;
        switch (static_cast<PytorchKey>(l.key)) {
          case PytorchKey::version:
            p.version = str(v);
            return;
          case PytorchKey::backend:
            p.backend = str(v);
            return;
          case PytorchKey::expandable_segments:
            p.expandable_segments = boolean_of(v);
            return;
          case PytorchKey::capture:
            p.capture = str(v);
            return;
          case PytorchKey::why:
            p.why = str(v);
            return;
        }
        return;
      }
      case C::kDriver: {
        DriverMemorySample& m = snap_.tool->driver_memory.back();
        switch (static_cast<DriverKey>(l.key)) {
          case DriverKey::time_us:
            m.time_us = static_cast<int64_t>(u64(v));
            return;
          case DriverKey::device:
            m.device = device(v);
            return;
          case DriverKey::used_bytes:
            m.used_bytes = u64(v);
            return;
        }
        return;
      }
      case C::kPool: {
        PoolMemorySample& m = snap_.tool->pool_memory.back();
        switch (static_cast<PoolKey>(l.key)) {
          case PoolKey::time_us:
            m.time_us = static_cast<int64_t>(u64(v));
            return;
          case PoolKey::device:
            m.device = device(v);
            return;
          case PoolKey::pool:
            m.pool = u64(v);
            return;
          case PoolKey::reserved_bytes:
            m.reserved_bytes = u64(v);
            return;
          case PoolKey::used_bytes:
            m.used_bytes = u64(v);
            return;
        }
        return;
      }
      case C::kContext: {
        ContextMemory& c = snap_.tool->contexts.back();
        switch (static_cast<CtxKey>(l.key)) {
          case CtxKey::device:
            c.device = device(v);
            return;
          case CtxKey::bytes:
            c.bytes = u64(v);
            return;
          case CtxKey::time_us:
            c.time_us = static_cast<int64_t>(u64(v));
            return;
          case CtxKey::end_time_us:
            c.end_time_us = static_cast<int64_t>(u64(v));
            if (c.end_time_us == 0) fail("expected a positive end time");
            return;
          case CtxKey::api:
            c.api = str(v);
            if (c.api != "cuDevicePrimaryCtxRetain" && c.api != "cuCtxCreate")
              fail("expected api \"cuDevicePrimaryCtxRetain\" or \"cuCtxCreate\"");
            return;
          case CtxKey::handle:
            c.handle = u64(v);
            return;
        }
        return;
      }
      case C::kDevice: {
        DeviceSummary& d = snap_.tool->devices.back();
        switch (static_cast<DeviceKey>(l.key)) {
          case DeviceKey::device:
            d.device = device(v);
            return;
          case DeviceKey::peak_bytes:
            d.peak_bytes = u64(v);
            return;
          case DeviceKey::peak_time_us:
            d.peak_time_us = static_cast<int64_t>(u64(v));
            return;
          case DeviceKey::live_bytes:
            d.live_bytes = u64(v);
            return;
          case DeviceKey::allocations:
            d.allocations = u64(v);
            return;
          case DeviceKey::frees:
            d.frees = u64(v);
            return;
          case DeviceKey::graph_reserved_bytes:
            d.graph_reserved_bytes = u64(v);
            return;
          case DeviceKey::graph_reserved_peak_bytes:
            d.graph_reserved_peak_bytes = u64(v);
            return;
        }
        return;
      }
      case C::kVmm: {
        VmmHandle& h = snap_.tool->vmm_handles.back();
        switch (static_cast<VmmKey>(l.key)) {
          case VmmKey::handle:
            h.handle = u64(v);
            return;
          case VmmKey::size:
            h.size = u64(v);
            return;
          case VmmKey::device:
            h.device = device(v);
            return;
          case VmmKey::time_us:
            h.time_us = static_cast<int64_t>(u64(v));
            return;
          case VmmKey::frames:
            fail("expected an array");
        }
        return;
      }
      case C::kImp: {
        ImportedMapping& m = snap_.tool->imported_mappings.back();
        switch (static_cast<ImpKey>(l.key)) {
          case ImpKey::addr:
            m.addr = u64(v);
            return;
          case ImpKey::size:
            m.size = u64(v);
            return;
          case ImpKey::device:
            m.device = device(v);
            return;
          case ImpKey::handle:
            m.handle = u64(v);
            return;
          case ImpKey::time_us:
            m.time_us = static_cast<int64_t>(u64(v));
            return;
          case ImpKey::frames:
            fail("expected an array");
        }
        return;
      }
      case C::kHost: {
        HostAllocation& h = snap_.tool->host_allocations.back();
        switch (static_cast<HostKey>(l.key)) {
          case HostKey::addr:
            h.addr = u64(v);
            return;
          case HostKey::size:
            h.size = u64(v);
            return;
          case HostKey::api:
            h.api = str(v);
            return;
          case HostKey::time_us:
            h.time_us = static_cast<int64_t>(u64(v));
            return;
          case HostKey::frames:
            fail("expected an array");
        }
        return;
      }
      case C::kAnom: {
        Anomaly& a = snap_.tool->anomalies.back();
        switch (static_cast<AnomKey>(l.key)) {
          case AnomKey::kind:
            a.kind = str(v);
            return;
          case AnomKey::addr:
            a.addr = u64(v);
            return;
          case AnomKey::api:
            a.api = str(v);
            return;
          case AnomKey::time_us:
            a.time_us = static_cast<int64_t>(u64(v));
            return;
          case AnomKey::tid:
            a.tid = tid(v);
            return;
          case AnomKey::frames:
            fail("expected an array");
        }
        return;
      }
      default:
        return;
    }
  }

  void push(C c, std::string_view key_name) {
    if (stack_.size() >= kMaxDepth) fail_plain("expected JSON nested at most 512 levels deep");
    Level l;
    l.c = c;
    l.key_name = key_name;
    stack_.push_back(l);
  }

  bool start(bool object) {
    if (stack_.empty()) {
      if (!object) fail_plain("expected a JSON object at top level");
      push(C::kRoot, {});
      return true;
    }
    Level& l = stack_.back();
    const std::string_view want_obj = "expected an object";
    const std::string_view want_arr = "expected an array";
    auto need = [&](bool want_object) {
      if (object != want_object) fail(want_object ? want_obj : want_arr);
    };
    auto key_name = [&]() -> std::string_view {
      const Keys* k = keys_of(l.c);
      return k && l.key >= 0 ? (*k)[l.key] : std::string_view{};
    };
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
        need(true);
        seg_ = Segment{};
        push(C::kSegment, {});
        return true;
      case C::kBlocks:
        need(true);
        block_ = Block{};
        push(C::kBlock, {});
        return true;
      case C::kFrames:
        need(true);
        // Frame slots are reused across stacks so their strings keep their capacity.
        if (nframes_ == frames_.size()) frames_.emplace_back();
        frames_[nframes_].filename.clear();
        frames_[nframes_].name.clear();
        frames_[nframes_].line = 0;
        push(C::kFrame, {});
        return true;
      case C::kTraces:
        need(false);
        snap_.device_traces.emplace_back();
        push(C::kTrace, {});
        return true;
      case C::kTrace:
        need(true);
        entry_ = TraceEntry{};
        push(C::kEntry, {});
        return true;
      case C::kAnnotations:
        need(true);
        ann_ = Annotation{};
        push(C::kAnnotation, {});
        return true;
      case C::kDevices:
        need(true);
        snap_.tool->devices.emplace_back();
        push(C::kDevice, {});
        return true;
      case C::kDrivers:
        need(true);
        snap_.tool->driver_memory.emplace_back();
        push(C::kDriver, {});
        return true;
      case C::kPools:
        need(true);
        snap_.tool->pool_memory.emplace_back();
        push(C::kPool, {});
        return true;
      case C::kContexts:
        need(true);
        snap_.tool->contexts.emplace_back();
        push(C::kContext, {});
        return true;
      case C::kVmms:
        need(true);
        snap_.tool->vmm_handles.emplace_back();
        push(C::kVmm, {});
        return true;
      case C::kImps:
        need(true);
        snap_.tool->imported_mappings.emplace_back();
        push(C::kImp, {});
        return true;
      case C::kHosts:
        need(true);
        snap_.tool->host_allocations.emplace_back();
        push(C::kHost, {});
        return true;
      case C::kAnoms:
        need(true);
        snap_.tool->anomalies.emplace_back();
        push(C::kAnom, {});
        return true;
      case C::kOwners:
        need(true);
        snap_.tool->ownership.emplace_back();
        push(C::kOwner, {});
        return true;
      case C::kOwnerTensors:
        if (object) fail("expected a [pointer, bytes] pair");
        snap_.tool->ownership.back().tensors.emplace_back(0, 0);
        push(C::kOwnerPair, {});
        return true;
      case C::kOwnerPair:
        fail("expected an integer");
      case C::kArgv:
      case C::kStrMap:
        fail("expected a string");
      case C::kPoolId:
        fail("expected an integer");
      default:
        break;
    }
    if (keys_of(l.c) == nullptr) fail("unexpected value");
    if (l.key < 0) {
      push(C::kSkip, {});
      return true;
    }
    const std::string_view kn = key_name();
    if (kn == "frames") {
      need(false);
      nframes_ = 0;
      push(C::kFrames, kn);
      return true;
    }
    switch (l.c) {
      case C::kRoot:
        switch (static_cast<RootKey>(l.key)) {
          case RootKey::segments:
            need(false);
            push(C::kSegments, kn);
            return true;
          case RootKey::device_traces:
            need(false);
            snap_.device_traces.clear();
            push(C::kTraces, kn);
            return true;
          case RootKey::allocator_settings:
            need(true);
            push(C::kSettings, kn);
            return true;
          case RootKey::external_annotations:
            need(false);
            push(C::kAnnotations, kn);
            return true;
          case RootKey::cumemtrace:
            need(true);
            snap_.tool.emplace();
            push(C::kTool, kn);
            return true;
        }
        break;
      case C::kSegment:
        if (static_cast<SegKey>(l.key) == SegKey::segment_pool_id) {
          need(false);
          push(C::kPoolId, kn);
          return true;
        }
        if (static_cast<SegKey>(l.key) == SegKey::blocks) {
          need(false);
          push(C::kBlocks, kn);
          return true;
        }
        break;
      case C::kTool:
        switch (static_cast<ToolKey>(l.key)) {
          case ToolKey::argv:
            need(false);
            snap_.tool->argv.clear();
            push(C::kArgv, kn);
            return true;
          case ToolKey::rank:
          case ToolKey::threads: {
            need(true);
            // push() may reallocate the stack, and `l` with it: read the key first.
            std::string* name =
                static_cast<ToolKey>(l.key) == ToolKey::rank ? &rank_name_ : &threads_name_;
            push(C::kStrMap, kn);
            stack_.back().map_key = name;
            return true;
          }
          case ToolKey::ended:
            need(true);
            push(C::kEnded, kn);
            return true;
          case ToolKey::pytorch:
            need(true);
            snap_.tool->pytorch.emplace();
            push(C::kPytorch, kn);
            return true;
          case ToolKey::devices:
            need(false);
            push(C::kDevices, kn);
            return true;
          case ToolKey::vmm_handles:
            need(false);
            push(C::kVmms, kn);
            return true;
          case ToolKey::host_allocations:
            need(false);
            push(C::kHosts, kn);
            return true;
          case ToolKey::imported_mappings:
            need(false);
            push(C::kImps, kn);
            return true;
          case ToolKey::anomalies:
            need(false);
            push(C::kAnoms, kn);
            return true;
          case ToolKey::driver_memory:
            need(false);
            push(C::kDrivers, kn);
            return true;
          case ToolKey::pool_memory:
            need(false);
            push(C::kPools, kn);
            return true;
          case ToolKey::contexts:
            need(false);
            push(C::kContexts, kn);
            return true;
          case ToolKey::ownership:
            need(false);
            push(C::kOwners, kn);
            return true;
          default:
            break;
        }
        break;
      case C::kOwner:
        if (static_cast<OwnerKey>(l.key) == OwnerKey::tensors) {
          need(false);
          push(C::kOwnerTensors, kn);
          return true;
        }
        break;
      default:
        break;
    }
    const bool string_key =
        (l.c == C::kSegment && (static_cast<SegKey>(l.key) == SegKey::segment_type ||
                                static_cast<SegKey>(l.key) == SegKey::source)) ||
        (l.c == C::kEntry && static_cast<EntryKey>(l.key) == EntryKey::source);
    fail(string_key ? "expected a string" : "expected a number or string");
  }

  // Identical frame lists share one Snapshot::stacks entry: hash -> first index, chained
  // through interned_next_ on collisions.
  void assign_stack(C owner, int32_t idx) {
    switch (owner) {
      case C::kSegment:
        seg_.stack = idx;
        break;
      case C::kBlock:
        block_.stack = idx;
        break;
      case C::kEntry:
        entry_.stack = idx;
        break;
      case C::kVmm:
        snap_.tool->vmm_handles.back().stack = idx;
        break;
      case C::kImp:
        snap_.tool->imported_mappings.back().stack = idx;
        break;
      case C::kHost:
        snap_.tool->host_allocations.back().stack = idx;
        break;
      case C::kAnom:
        snap_.tool->anomalies.back().stack = idx;
        break;
      default:
        break;
    }
  }

  int32_t intern() {
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

  void check_required(const Level& l) {
    uint32_t missing = required_of(l.c) & ~l.seen;
    if (!missing) return;
    const Keys* keys = keys_of(l.c);
    for (size_t i = 0; i < keys->size(); ++i) {
      if (missing & (1u << i)) fail(fmt::format("expected key \"{}\"", (*keys)[i]));
    }
  }

  bool end() {
    Level l = stack_.back();
    if (keys_of(l.c)) {
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
        assign_stack(parent.c, idx);
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
        if (entry_.action == Action::kOom) {
          if (!(l.seen & bits(EntryKey::device_free)))
            fail("expected key \"device_free\" on an oom entry");
        } else if (!(l.seen & bits(EntryKey::addr))) {
          fail("expected key \"addr\"");
        }
        snap_.device_traces.back().push_back(entry_);
        break;
      case C::kAnnotation:
        snap_.annotations.push_back(std::move(ann_));
        break;
      case C::kContext: {
        const ContextMemory& c = snap_.tool->contexts.back();
        if (c.end_time_us && c.end_time_us < c.time_us)
          fail_plain(
              fmt::format("a context ends before it begins at contexts[{}]", parent.index - 1));
        break;
      }
      case C::kPoolId:
        if (l.index != 2) fail("expected segment_pool_id to be a pair of integers");
        break;
      case C::kOwnerPair:
        if (l.index != 2) fail("expected a [pointer, bytes] pair");
        break;
      default:
        break;
    }
    return true;
  }

 private:
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
  Annotation ann_;
  std::string cur_key_;
  std::string capture_;
  bool capture_comma_ = false;
  std::string capture_kinds_;
  std::string rank_name_ = "rank";
  std::string threads_name_ = "threads";
  std::unordered_map<size_t, int32_t> interned_;
  std::unordered_map<std::string_view, int32_t> raw_frames_;  // views into the input text
  std::string_view pending_raw_;
  std::vector<int32_t> interned_next_;
};

// A JSON scanner that drives the same SAX handler as nlohmann::json::sax_parse, several times
// faster: nlohmann's lexer reads through an input adapter one character at a time and appends
// each to a token string, which made a 1 M-event snapshot take ~10 s to read. This one scans
// spans in place. It accepts exactly RFC 8259 JSON as nlohmann does (UTF-8 validated, surrogate
// pairs checked, leading BOM skipped, nothing after the value); read_snapshot_reference keeps
// the nlohmann path so tests and the fuzzer compare the two.
template <typename Sax>
class Scanner {
 public:
  Scanner(std::string_view text, const std::string& name, Sax& sax, const char** pos)
      : begin_(text.data()),
        p_(text.data()),
        end_(text.data() + text.size()),
        name_(name),
        sax_(sax),
        pos_(pos) {}

  void run() {
    if (end_ - p_ >= 3 && static_cast<unsigned char>(p_[0]) == 0xEF &&
        static_cast<unsigned char>(p_[1]) == 0xBB && static_cast<unsigned char>(p_[2]) == 0xBF)
      p_ += 3;
    std::string stack;  // '{' or '[' per open container
    skip_ws();
    for (;;) {
      // A value starts here.
      if (p_ == end_) fail("expected a value, found the end of the input");
      switch (*p_) {
        case '{':
          ++p_;
          sync();
          sax_.start_object(std::size_t(-1));
          stack.push_back('{');
          skip_ws();
          if (p_ < end_ && *p_ == '}') {
            ++p_;
            sync();
            sax_.end_object();
            stack.pop_back();
          } else {
            read_key();
            continue;
          }
          break;
        case '[':
          if (sax_.frames_next()) {
            if (const char* close = matching_bracket(p_)) {
              if (sax_.reuse_frames(std::string_view(p_, static_cast<size_t>(close + 1 - p_)))) {
                p_ = close + 1;
                sync();
                break;
              }
            }
          }
          ++p_;
          sync();
          sax_.start_array(std::size_t(-1));
          stack.push_back('[');
          skip_ws();
          if (p_ < end_ && *p_ == ']') {
            ++p_;
            sync();
            sax_.end_array();
            stack.pop_back();
          } else {
            continue;
          }
          break;
        case '"':
          read_string();
          sax_.string(buf_);
          break;
        case 't':
          literal("true");
          sax_.boolean(true);
          break;
        case 'f':
          literal("false");
          sax_.boolean(false);
          break;
        case 'n':
          literal("null");
          sax_.null();
          break;
        default:
          number();
          break;
      }
      // After a value: close containers or move to the next element.
      for (;;) {
        skip_ws();
        if (stack.empty()) {
          if (p_ != end_) fail("expected the end of the input after the top-level value");
          return;
        }
        if (p_ == end_) fail("unexpected end of the input");
        const char c = *p_;
        if (c == ',') {
          ++p_;
          skip_ws();
          if (stack.back() == '{') read_key();
          break;
        }
        if (c == (stack.back() == '{' ? '}' : ']')) {
          ++p_;
          sync();
          if (stack.back() == '{') {
            sax_.end_object();
          } else {
            sax_.end_array();
          }
          stack.pop_back();
          continue;
        }
        fail(stack.back() == '{' ? "expected ',' or '}' after an object member"
                                 : "expected ',' or ']' after an array element");
      }
    }
  }

 private:
  [[noreturn]] void fail(std::string_view what) const {
    throw ReadError(fmt::format("{}:offset {}: invalid JSON ({})", name_, p_ - begin_, what));
  }
  void sync() { *pos_ = p_; }

  // The bracket closing the container opened at q, skipping strings; nullptr when the text ends
  // first or brackets do not pair up (then the normal parse reports the error).
  const char* matching_bracket(const char* q) const {
    std::string kinds;
    for (; q < end_; ++q) {
      const char c = *q;
      if (c == '"') {
        // memchr to the next quote; a quote preceded by an odd run of backslashes is escaped.
        const char* open = q;
        for (;;) {
          q = static_cast<const char*>(std::memchr(q + 1, '"', static_cast<size_t>(end_ - q - 1)));
          if (q == nullptr) return nullptr;
          size_t backslashes = 0;
          for (const char* b = q - 1; b > open && *b == '\\'; --b) ++backslashes;
          if (backslashes % 2 == 0) break;
        }
      } else if (c == '[' || c == '{') {
        kinds.push_back(c == '[' ? ']' : '}');
      } else if (c == ']' || c == '}') {
        if (kinds.empty() || kinds.back() != c) return nullptr;
        kinds.pop_back();
        if (kinds.empty()) return q;
      }
    }
    return nullptr;
  }

  void skip_ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  void read_key() {
    if (p_ == end_ || *p_ != '"') fail("expected a string as object key");
    read_string();
    sax_.key(buf_);
    skip_ws();
    if (p_ == end_ || *p_ != ':') fail("expected ':' after an object key");
    ++p_;
    skip_ws();
  }

  void literal(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word)
      fail("expected a value");
    p_ += word.size();
    sync();
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  unsigned read_u4() {
    if (end_ - p_ < 4) fail("expected four hex digits after \\u");
    unsigned v = 0;
    for (int i = 0; i < 4; ++i) {
      const int h = hex(p_[i]);
      if (h < 0) fail("expected four hex digits after \\u");
      v = v * 16 + static_cast<unsigned>(h);
    }
    p_ += 4;
    return v;
  }
  void put_utf8(unsigned cp) {
    if (cp < 0x80) {
      buf_.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      buf_.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      buf_.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      buf_.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      buf_.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      buf_.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      buf_.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      buf_.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      buf_.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      buf_.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  // Validates one UTF-8 sequence starting at p_ (RFC 3629: no overlongs, no surrogates, at most
  // U+10FFFF) and advances past it.
  void utf8_sequence() {
    const auto* u = reinterpret_cast<const unsigned char*>(p_);
    const auto left = end_ - p_;
    auto cont = [&](int i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
      return i < left && u[i] >= lo && u[i] <= hi;
    };
    int n = 0;
    if (u[0] >= 0xC2 && u[0] <= 0xDF) {
      n = cont(1) ? 2 : 0;
    } else if (u[0] == 0xE0) {
      n = cont(1, 0xA0) && cont(2) ? 3 : 0;
    } else if ((u[0] >= 0xE1 && u[0] <= 0xEC) || u[0] == 0xEE || u[0] == 0xEF) {
      n = cont(1) && cont(2) ? 3 : 0;
    } else if (u[0] == 0xED) {
      n = cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
    } else if (u[0] == 0xF0) {
      n = cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
    } else if (u[0] >= 0xF1 && u[0] <= 0xF3) {
      n = cont(1) && cont(2) && cont(3) ? 4 : 0;
    } else if (u[0] == 0xF4) {
      n = cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
    }
    if (n == 0) fail("invalid UTF-8 in a string");
    p_ += n;
  }

  // Reads a string starting at the opening quote into buf_.
  void read_string() {
    ++p_;
    buf_.clear();
    for (;;) {
      const char* run = p_;
      // Eight bytes at a time while none is a quote, a backslash, a control or a non-ASCII byte.
      while (end_ - p_ >= 8) {
        uint64_t x;
        std::memcpy(&x, p_, 8);
        constexpr uint64_t kOnes = 0x0101010101010101ull, kHigh = 0x8080808080808080ull;
        const uint64_t q = x ^ (kOnes * '"'), b = x ^ (kOnes * '\\');
        const uint64_t special =
            ((q - kOnes) & ~q) | ((b - kOnes) & ~b) | ((x - kOnes * 0x20) & ~x) | x;
        if (special & kHigh) break;
        p_ += 8;
      }
      while (p_ < end_) {
        const auto c = static_cast<unsigned char>(*p_);
        if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
        ++p_;
      }
      buf_.append(run, static_cast<size_t>(p_ - run));
      if (p_ == end_) fail("unterminated string");
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        sync();
        return;
      }
      if (c < 0x20) fail("control character in a string (must be escaped)");
      if (c >= 0x80) {
        const char* start = p_;
        utf8_sequence();
        buf_.append(start, static_cast<size_t>(p_ - start));
        continue;
      }
      // Backslash escape.
      ++p_;
      if (p_ == end_) fail("unterminated string");
      const char e = *p_++;
      switch (e) {
        case '"':
          buf_.push_back('"');
          break;
        case '\\':
          buf_.push_back('\\');
          break;
        case '/':
          buf_.push_back('/');
          break;
        case 'b':
          buf_.push_back('\b');
          break;
        case 'f':
          buf_.push_back('\f');
          break;
        case 'n':
          buf_.push_back('\n');
          break;
        case 'r':
          buf_.push_back('\r');
          break;
        case 't':
          buf_.push_back('\t');
          break;
        case 'u': {
          unsigned cp = read_u4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u')
              fail("expected a low surrogate \\uDC00-\\uDFFF after a high surrogate");
            p_ += 2;
            const unsigned lo = read_u4();
            if (lo < 0xDC00 || lo > 0xDFFF)
              fail("expected a low surrogate \\uDC00-\\uDFFF after a high surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            fail("a low surrogate must follow a high surrogate");
          }
          put_utf8(cp);
          break;
        }
        default:
          --p_;
          fail("invalid escape in a string");
      }
    }
  }

  void number() {
    const char* start = p_;
    bool negative = false;
    if (p_ < end_ && *p_ == '-') {
      negative = true;
      ++p_;
    }
    if (p_ == end_ || !(*p_ >= '0' && *p_ <= '9')) fail("expected a value");
    bool integral = true;
    uint64_t v = 0;
    bool overflow = false;
    if (*p_ == '0') {
      ++p_;
    } else {
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') {
        const auto d = static_cast<uint64_t>(*p_ - '0');
        if (v > (UINT64_MAX - d) / 10) overflow = true;
        v = v * 10 + d;
        ++p_;
      }
    }
    if (p_ < end_ && *p_ == '.') {
      integral = false;
      ++p_;
      if (p_ == end_ || !(*p_ >= '0' && *p_ <= '9')) fail("expected a digit after '.'");
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    if (p_ < end_ && (*p_ == 'e' || *p_ == 'E')) {
      integral = false;
      ++p_;
      if (p_ < end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !(*p_ >= '0' && *p_ <= '9')) fail("expected a digit in the exponent");
      while (p_ < end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    }
    sync();
    if (integral && !overflow) {
      if (!negative) {
        sax_.number_unsigned(v);
        return;
      }
      if (v <= static_cast<uint64_t>(INT64_MAX) + 1) {
        sax_.number_integer(v == static_cast<uint64_t>(INT64_MAX) + 1 ? INT64_MIN
                                                                      : -static_cast<int64_t>(v));
        return;
      }
    }
    // Like nlohmann: what no 64-bit integer holds is a floating-point number.
    buf_.assign(start, static_cast<size_t>(p_ - start));
    sax_.number_float(std::strtod(buf_.c_str(), nullptr), buf_);
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  const std::string& name_;
  Sax& sax_;
  const char** pos_;
  std::string buf_;
};

}  // namespace

Snapshot read_snapshot(std::string_view text, const std::string& name) {
  Handler h(name, text.data());
  try {
    Scanner<Handler>(text, name, h, h.pos_slot()).run();
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
