#include "viz/pprof_writer.h"

#include <zlib.h>

#include <array>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "analysis/frames.h"
#include "analysis/model.h"
#include "pytorch/modules.h"
#include "viz/protobuf_encoder.h"

namespace cumemtrace::viz {

namespace {

// profile.proto's field numbers, by message.
namespace profile_field {
enum : uint32_t {
  kSampleType = 1,
  kSample = 2,
  kMapping = 3,
  kLocation = 4,
  kFunction = 5,
  kStringTable = 6,
  kTimeNanos = 9,
  kDurationNanos = 10,
  kPeriodType = 11,
  kPeriod = 12,
  kComment = 13,
  kDefaultSampleType = 14,
};
}  // namespace profile_field

// The sample types, in the order of every sample's values (header contract).
enum Value : size_t {
  kAllocObjects,
  kAllocSpace,
  kInuseObjects,
  kInuseSpace,
  kPeakObjects,
  kPeakSpace,
  kValues
};
constexpr std::array<std::pair<const char*, const char*>, kValues> kSampleTypes = {{
    {"alloc_objects", "count"},
    {"alloc_space", "bytes"},
    {"inuse_objects", "count"},
    {"inuse_space", "bytes"},
    {"peak_inuse_objects", "count"},
    {"peak_inuse_space", "bytes"},
}};

// What a sample's stack is: a recorded stack, or one of the lines report shows in its place.
enum class Pseudo { kStack, kNoStack, kBeforeTrace, kCachedFree };

struct SampleKey {
  int device = 0;
  Pseudo pseudo = Pseudo::kStack;
  int32_t stack = snap::kNoStack;
  snap::Category category = snap::Category::kNone;
  bool operator<(const SampleKey& o) const {
    return std::tie(device, pseudo, stack, category) <
           std::tie(o.device, o.pseudo, o.stack, o.category);
  }
};

class ProfileBuilder {
 public:
  explicit ProfileBuilder(const snap::Snapshot& s) : s_(s), sites_(s) {
    if (s.tool && !s.tool->exe.empty()) mapping(s.tool->exe);
  }

  void add(const SampleKey& k, Value count, Value bytes, uint64_t size) {
    auto& v = samples_[k];
    v[count] += 1;
    v[bytes] = analysis::wrap_add(v[bytes], static_cast<int64_t>(size));
  }
  // An allocation of the model (live at exit or at a peak).
  void add(const analysis::Allocation& a, Value count, Value bytes) {
    add(key(a.device, a.stack, a.before_trace, a.category), count, bytes, a.size);
  }
  SampleKey key(int device, int32_t stack, bool before_trace, snap::Category c) const {
    SampleKey k{device, Pseudo::kStack, stack, c};
    if (stack < 0 || static_cast<size_t>(stack) >= s_.stacks.size() || sites_.site_frame(stack) < 0)
      k = {device, before_trace ? Pseudo::kBeforeTrace : Pseudo::kNoStack, snap::kNoStack, c};
    return k;
  }
  void add_cached_free(int device, uint64_t bytes) {
    samples_[{device, Pseudo::kCachedFree, snap::kNoStack, snap::Category::kNone}][kPeakSpace] +=
        static_cast<int64_t>(bytes);
  }

  std::string finish();

 private:
  int64_t str(const std::string& v) {
    auto [it, inserted] = strings_.emplace(v, static_cast<int64_t>(string_table_.size()));
    if (inserted) string_table_.push_back(v);
    return it->second;
  }
  uint64_t mapping(const std::string& file);
  uint64_t function(const std::string& name, const std::string& system_name,
                    const std::string& file);
  uint64_t location(uint64_t function_id, int64_t line, uint64_t mapping_id);
  std::vector<uint64_t> stack_locations(const SampleKey& k);

  const snap::Snapshot& s_;
  analysis::SiteTable sites_;
  std::map<SampleKey, std::array<int64_t, kValues>> samples_;
  std::vector<std::string> string_table_{""};  // index 0 is "" (profile.proto)
  std::unordered_map<std::string, int64_t> strings_{{"", 0}};
  std::map<std::string, uint64_t> mapping_ids_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> function_ids_;
  std::map<std::tuple<uint64_t, int64_t, uint64_t>, uint64_t> location_ids_;
  std::unordered_map<int32_t, std::vector<uint64_t>> stack_ids_;
  ProtoMessage mappings_, functions_, locations_;
};

uint64_t ProfileBuilder::mapping(const std::string& file) {
  auto [it, inserted] = mapping_ids_.emplace(file, mapping_ids_.size() + 1);
  if (inserted) {
    ProtoMessage m;
    m.uint(1, it->second);  // id
    m.int64(5, str(file));  // filename
    // Frames come symbolized: tell pprof not to look for the file to symbolize them again.
    m.boolean(7, true);   // has_functions
    m.boolean(8, true);   // has_filenames
    m.boolean(9, true);   // has_line_numbers
    m.boolean(10, true);  // has_inline_frames
    mappings_.message(profile_field::kMapping, m);
  }
  return it->second;
}

uint64_t ProfileBuilder::function(const std::string& name, const std::string& system_name,
                                  const std::string& file) {
  auto [it, inserted] =
      function_ids_.emplace(std::make_tuple(name, system_name, file), function_ids_.size() + 1);
  if (inserted) {
    ProtoMessage f;
    f.uint(1, it->second);
    f.int64(2, str(name));
    f.int64(3, str(system_name));
    f.int64(4, str(file));
    functions_.message(profile_field::kFunction, f);
  }
  return it->second;
}

uint64_t ProfileBuilder::location(uint64_t function_id, int64_t line, uint64_t mapping_id) {
  auto [it, inserted] = location_ids_.emplace(std::make_tuple(function_id, line, mapping_id),
                                              location_ids_.size() + 1);
  if (inserted) {
    ProtoMessage ln;
    ln.uint(1, function_id);
    ln.int64(2, line);
    ProtoMessage l;
    l.uint(1, it->second);
    l.uint(2, mapping_id);
    l.message(4, ln);
    locations_.message(profile_field::kLocation, l);
  }
  return it->second;
}

std::vector<uint64_t> ProfileBuilder::stack_locations(const SampleKey& k) {
  if (k.pseudo != Pseudo::kStack) {
    const std::string label = k.pseudo == Pseudo::kNoStack       ? analysis::kNoStackSite
                              : k.pseudo == Pseudo::kBeforeTrace ? analysis::kBeforeTraceSite
                                                                 : analysis::kCachedFreeLabel;
    return {location(function(label, label, ""), 0, 0)};
  }
  auto [it, inserted] = stack_ids_.try_emplace(k.stack);
  if (!inserted) return it->second;
  // The library's Python frames inside the user's site come first (report's "via": `forward
  // (train.py:76) via Linear.forward (linear.py:134)` is a site of its own), so that a user line
  // calling three libraries is three stacks, as it is three rows of report.
  std::vector<const snap::Frame*> frames;
  const auto& st = s_.stacks[static_cast<size_t>(k.stack)];
  const int site = sites_.site_frame(k.stack);
  // On autograd's engine thread the via frame is the node (frames.h), a native frame of its own.
  if (const int via = analysis::via_frame_index(st, site); via >= 0) {
    for (int j = via; j < site; ++j)
      if (j == via || analysis::is_python_frame(st[static_cast<size_t>(j)]))
        frames.push_back(&st[static_cast<size_t>(j)]);
  }
  for (const snap::Frame* f : sites_.program_frames(k.stack, std::numeric_limits<size_t>::max()))
    frames.push_back(f);
  for (const snap::Frame* f : frames) {
    const bool python = analysis::is_python_frame(*f);
    const std::string file = f->filename == "??" ? std::string() : f->filename;
    // In cumemtrace's files a native frame without line information carries its module's path
    // (live/symbolizer.cpp); PyTorch's name a source file there too.
    const uint64_t m = s_.tool && !python && f->line <= 0 && !file.empty() ? mapping(file) : 0;
    const std::string name = f->name.empty() ? "??"
                             : python        ? f->name
                                             : analysis::short_function_name(f->name);
    // A Python frame's name is its own, never mangled: no system name, so that pprof, which
    // simplifies a name equal to its system name as if it were C++ ("<module>" became nothing,
    // shown as "<unknown>"), keeps it as it is.
    it->second.push_back(
        location(function(name, python ? std::string() : f->name, file), f->line, m));
  }
  return it->second;
}

std::string ProfileBuilder::finish() {
  ProtoMessage p;
  for (const auto& [type, unit] : kSampleTypes) {
    ProtoMessage vt;
    vt.int64(1, str(type));
    vt.int64(2, str(unit));
    p.message(profile_field::kSampleType, vt);
  }
  const int64_t device_key = str("device"), category_key = str("category");
  const int64_t module_key = str("module");
  for (const auto& [k, values] : samples_) {
    ProtoMessage sm;
    sm.packed(1, stack_locations(k));
    std::vector<uint64_t> vs;
    for (int64_t v : values) vs.push_back(static_cast<uint64_t>(v));
    sm.packed(2, vs);
    ProtoMessage device;
    device.int64(1, device_key);
    device.int64(2, str("cuda:" + std::to_string(k.device)));
    sm.message(3, device);
    if (k.category != snap::Category::kNone) {
      ProtoMessage category;
      category.int64(1, category_key);
      category.int64(2, str(std::string(snap::category_name(k.category))));
      sm.message(3, category);
    }
    // The innermost module call on the stack (pytorch/modules.h), as the by-module view places
    // a tensor made in forward: `pprof -tagfocus=module=...` keeps one module's bytes.
    if (const auto module = analysis::stack_module(s_, k.stack); !module.empty()) {
      ProtoMessage m;
      m.int64(1, module_key);
      m.int64(2, str(std::string(module)));
      sm.message(3, m);
    }
    p.message(profile_field::kSample, sm);
  }
  ProtoMessage period_type;
  period_type.int64(1, str("space"));
  period_type.int64(2, str("bytes"));
  p.message(profile_field::kPeriodType, period_type);
  p.int64(profile_field::kPeriod, 1);
  if (s_.tool) {
    const auto& t = *s_.tool;
    p.int64(profile_field::kTimeNanos, t.start_time_us * 1000);
    if (t.end_time_us > t.start_time_us)
      p.int64(profile_field::kDurationNanos, (t.end_time_us - t.start_time_us) * 1000);
    p.int64(profile_field::kComment, str("cumemtrace: " + t.exe + " (pid " + std::to_string(t.pid) +
                                         "), written on " + t.reason));
  }
  // A string index (the type's name), not an index into sample_type.
  p.int64(profile_field::kDefaultSampleType, str(kSampleTypes[kInuseSpace].first));
  // Tables last: building the samples above interned their strings, functions and locations.
  std::string out = p.data() + mappings_.data() + locations_.data() + functions_.data();
  ProtoMessage strings;
  for (const auto& v : string_table_) strings.bytes(profile_field::kStringTable, v);
  return out + strings.data();
}

}  // namespace

std::string pprof_profile(const snap::Snapshot& s) {
  ProfileBuilder b(s);
  const analysis::Flavor flavor = analysis::flavor_of(s);
  for (size_t d = 0; d < s.device_traces.size(); ++d)
    for (const auto& e : s.device_traces[d])
      if (analysis::is_request(flavor, e))
        b.add(b.key(static_cast<int>(d), e.stack, false, e.category), kAllocObjects, kAllocSpace,
              e.size);
  for (const auto& a : analysis::live_at_exit(s)) b.add(a, kInuseObjects, kInuseSpace);
  const int n = analysis::device_count(s);
  for (int d = 0; d < n; ++d) {
    const analysis::DeviceReplay rp(s, d);
    const analysis::Attributed at_peak = rp.attributed_after(rp.timeline().trace.index);
    for (const auto& a : at_peak.allocations) b.add(a, kPeakObjects, kPeakSpace);
    if (at_peak.cached_free) b.add_cached_free(d, at_peak.cached_free);
  }
  return b.finish();
}

std::string gzip_bytes(const std::string& data) {
  if (data.size() > std::numeric_limits<uInt>::max())
    throw std::runtime_error("profile too large to compress in one piece");
  z_stream z{};
  // windowBits 15 + 16: a gzip header and trailer instead of zlib's.
  if (deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
    throw std::runtime_error("cannot start gzip compression");
  std::string out(deflateBound(&z, data.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) throw std::runtime_error("gzip compression failed");
  return out;
}

void write_pprof(const snap::Snapshot& s, std::ostream& out) {
  const std::string gz = gzip_bytes(pprof_profile(s));
  out.write(gz.data(), static_cast<std::streamsize>(gz.size()));
}

}  // namespace cumemtrace::viz
