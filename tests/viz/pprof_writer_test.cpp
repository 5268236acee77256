// The pprof writer decoded back with an independent protobuf reader (below, from the wire-format
// spec): sample types, values, labels, stacks leaf first from the site, mappings, the string
// table; the gzip wrapper inflated with zlib; and on the real PyTorch fixture, every site's bytes
// at the peak and at exit equal to report's (one truth).
#include <zlib.h>
#include <catch2/catch.hpp>

#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "analysis/frames.h"
#include "analysis/grouping.h"
#include "io/snapshot_input.h"
#include "support/sample_snapshots.h"
#include "support/torch_fixture.h"
#include "verdicts/report.h"
#include "viz/pprof_writer.h"
#include "viz/protobuf_encoder.h"

using namespace cumemtrace;

namespace {

constexpr int64_t kMiB = 1 << 20;

// One decoded field: a varint (wire type 0) or the bytes of a length-delimited one (type 2).
struct Field {
  uint64_t varint = 0;
  std::string bytes;
};
using Message = std::multimap<uint32_t, Field>;

uint64_t read_varint(const std::string& b, size_t& i) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (i >= b.size()) throw std::runtime_error("truncated varint");
    const auto c = static_cast<uint8_t>(b[i++]);
    v |= uint64_t{c & 0x7fu} << shift;
    if (!(c & 0x80)) return v;
  }
  throw std::runtime_error("varint too long");
}

Message decode(const std::string& b) {
  Message m;
  size_t i = 0;
  while (i < b.size()) {
    const uint64_t key = read_varint(b, i);
    Field f;
    if ((key & 7) == 0) {
      f.varint = read_varint(b, i);
    } else if ((key & 7) == 2) {
      const uint64_t n = read_varint(b, i);
      if (n > b.size() - i) throw std::runtime_error("truncated field");
      f.bytes = b.substr(i, n);
      i += n;
    } else {
      throw std::runtime_error("unexpected wire type " + std::to_string(key & 7));
    }
    m.emplace(static_cast<uint32_t>(key >> 3), std::move(f));
  }
  return m;
}

uint64_t get(const Message& m, uint32_t field) {
  auto it = m.find(field);
  return it == m.end() ? 0 : it->second.varint;
}

std::vector<uint64_t> packed(const Message& m, uint32_t field) {
  std::vector<uint64_t> out;
  auto it = m.find(field);
  if (it == m.end()) return out;
  size_t i = 0;
  while (i < it->second.bytes.size()) out.push_back(read_varint(it->second.bytes, i));
  return out;
}

struct Frame {
  std::string name, system_name, file, mapping;
  int64_t line = 0;
};
struct Sample {
  std::vector<Frame> stack;  // leaf first
  std::vector<int64_t> values;
  std::map<std::string, std::string> labels;
};
struct Profile {
  std::vector<std::string> strings;
  std::vector<std::string> sample_types;  // "type/unit"
  std::string default_type;
  std::vector<std::string> mappings;  // in order
  std::vector<Sample> samples;
};

Profile parse(const std::string& bytes) {
  const Message p = decode(bytes);
  Profile out;
  for (auto [a, b] = p.equal_range(6); a != b; ++a) out.strings.push_back(a->second.bytes);
  REQUIRE(out.strings.size() > 1);
  const auto str = [&](uint64_t i) { return out.strings.at(i); };
  for (auto [a, b] = p.equal_range(1); a != b; ++a) {
    const Message vt = decode(a->second.bytes);
    out.sample_types.push_back(str(get(vt, 1)) + "/" + str(get(vt, 2)));
  }
  out.default_type = str(get(p, 14));  // the type's name: an index into the string table
  std::map<uint64_t, std::string> mapping_file;
  for (auto [a, b] = p.equal_range(3); a != b; ++a) {
    const Message m = decode(a->second.bytes);
    mapping_file[get(m, 1)] = str(get(m, 5));
    out.mappings.push_back(str(get(m, 5)));
    REQUIRE(get(m, 7) == 1);  // has_functions: pprof must not symbolize again
  }
  std::map<uint64_t, Message> functions;
  for (auto [a, b] = p.equal_range(5); a != b; ++a) {
    Message f = decode(a->second.bytes);
    functions[get(f, 1)] = f;
  }
  std::map<uint64_t, Frame> locations;
  for (auto [a, b] = p.equal_range(4); a != b; ++a) {
    const Message l = decode(a->second.bytes);
    REQUIRE(l.count(4) == 1);
    const Message line = decode(l.find(4)->second.bytes);
    const Message& f = functions.at(get(line, 1));
    Frame fr{str(get(f, 2)), str(get(f, 3)), str(get(f, 4)), "",
             static_cast<int64_t>(get(line, 2))};
    if (get(l, 2)) fr.mapping = mapping_file.at(get(l, 2));
    locations[get(l, 1)] = fr;
  }
  for (auto [a, b] = p.equal_range(2); a != b; ++a) {
    const Message sm = decode(a->second.bytes);
    Sample s;
    for (uint64_t id : packed(sm, 1)) s.stack.push_back(locations.at(id));
    for (uint64_t v : packed(sm, 2)) s.values.push_back(static_cast<int64_t>(v));
    for (auto [la, lb] = sm.equal_range(3); la != lb; ++la) {
      const Message l = decode(la->second.bytes);
      s.labels[str(get(l, 1))] = str(get(l, 2));
    }
    out.samples.push_back(s);
  }
  return out;
}

std::string gunzip(const std::string& gz) {
  z_stream z{};
  REQUIRE(inflateInit2(&z, 15 + 16) == Z_OK);  // gzip only, not zlib's or raw deflate
  std::string out(1 << 20, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = static_cast<uInt>(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  out.resize(z.total_out);
  inflateEnd(&z);
  REQUIRE(rc == Z_STREAM_END);
  return out;
}

const Sample& sample_at(const Profile& p, const std::string& leaf_name) {
  for (const auto& s : p.samples)
    if (!s.stack.empty() && s.stack.front().name == leaf_name) return s;
  throw std::runtime_error("no sample with leaf " + leaf_name);
}

}  // namespace

TEST_CASE("protobuf encoder: varints, negative int64, packed, nested and empty strings") {
  viz::ProtoMessage inner;
  inner.uint(1, 300);
  viz::ProtoMessage m;
  m.uint(1, 0);  // a default value is not written
  m.uint(2, 1);
  m.int64(3, -1);
  m.bytes(4, "");
  m.message(5, inner);
  m.packed(6, {1, 128, 0});
  REQUIRE(m.data() == std::string("\x10\x01"
                                  "\x18\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"
                                  "\x22\x00"
                                  "\x2a\x03\x08\xac\x02"
                                  "\x32\x04\x01\x80\x01\x00",
                                  26));
}

TEST_CASE("pprof: sample types, values per site, stacks from the site outwards") {
  const auto s = viz::testing::leak_snapshot();
  const std::string raw = viz::pprof_profile(s);
  std::ostringstream gz;
  viz::write_pprof(s, gz);
  REQUIRE(gunzip(gz.str()) == raw);
  const Profile p = parse(raw);
  REQUIRE(p.strings.at(0).empty());
  REQUIRE(p.sample_types == std::vector<std::string>{"alloc_objects/count", "alloc_space/bytes",
                                                     "inuse_objects/count", "inuse_space/bytes",
                                                     "peak_inuse_objects/count",
                                                     "peak_inuse_space/bytes"});
  REQUIRE(p.default_type == "inuse_space");
  REQUIRE(p.samples.size() == 3);
  // PyTorch's file: three tensors requested, all live at the peak (7 MiB), the 4 MiB one at exit.
  const Sample& train = sample_at(p, "train_step(...)");
  REQUIRE(train.values == std::vector<int64_t>{1, kMiB, 0, 0, 1, kMiB});
  REQUIRE(sample_at(p, "leaky_cache_grow(...)").values ==
          std::vector<int64_t>{1, 4 * kMiB, 1, 4 * kMiB, 1, 4 * kMiB});
  REQUIRE(sample_at(p, "scratch").values == std::vector<int64_t>{1, 2 * kMiB, 0, 0, 1, 2 * kMiB});
  REQUIRE(train.stack.size() == 2);
  REQUIRE(train.stack[0].system_name == "train_step(int)");
  REQUIRE(train.stack[0].file == "train.cpp");
  REQUIRE(train.stack[0].line == 10);
  REQUIRE(train.stack[1].name == "main");
  REQUIRE(train.stack[1].line == 5);
  REQUIRE(train.labels == std::map<std::string, std::string>{{"device", "cuda:0"}});
}

TEST_CASE("pprof: runtime frames inside the site left out, modules as mappings, pseudo stacks") {
  snap::Snapshot s;
  s.stacks = {
      // A driver allocation: libcuda's frame is machinery, the module-only frame is the site.
      {{"libcuda.so.1", 0, "cuMemAlloc_v2"},
       {"/opt/lib/libfoo.so", 0, "foo_alloc"},
       {"main.cpp", 3, "main"}},
      // A Python program's tensor: the library's frame the user's line called comes first, as
      // report's row "step (train.py:76) via forward (linear.py:134)" names both. Made inside a
      // module call: its sample carries the module's name.
      {{"/usr/lib/python3.12/site-packages/torch/nn/modules/linear.py", 134, "forward"},
       {"/usr/lib/python3.12/site-packages/torch/nn/modules/module.py", 1775,
        "Module._wrapped_call_impl", "h.0.mlp"},
       {"/home/u/train.py", 76, "step"},
       {"/home/u/train.py", 90, "<module>"}},
  };
  auto& t = s.device_traces.emplace_back();
  t.push_back({snap::Action::kSegmentAlloc, 0x1000, 100, 0, 10, -1, 0, 1});
  t.push_back({snap::Action::kSegmentAlloc, 0x2000, 200, 0, 11, -1, 0, 1});
  t.push_back({snap::Action::kSegmentAlloc, 0x3000, 300, 0, 12, -1, 0, 1});
  s.device_traces.resize(2);
  s.device_traces[1].push_back({snap::Action::kSegmentAlloc, 0x4000, 400, 0, 13, -1, 0, 1});
  s.device_traces[1].back().category = snap::Category::kLibrary;
  for (int32_t st : {0, 1, snap::kNoStack}) {
    snap::Segment g;
    g.address = 0x1000 * static_cast<uint64_t>(st + 2);
    g.total_size = g.allocated_size = g.active_size = g.requested_size = 100 * (st + 2);
    g.stack = st;
    g.blocks.push_back({g.address, g.total_size, g.total_size, "active_allocated", st});
    s.segments.push_back(g);
  }
  snap::Segment d1;
  d1.device = 1;
  d1.address = 0x4000;
  d1.total_size = d1.allocated_size = d1.active_size = d1.requested_size = 400;
  d1.stack = 0;
  d1.blocks.push_back({d1.address, 400, 400, "active_allocated", 0});
  s.segments.push_back(d1);
  snap::ToolSection tool;
  tool.exe = "/usr/bin/prog";
  tool.pid = 7;
  s.tool = tool;
  const Profile p = parse(viz::pprof_profile(s));
  // The program first (pprof names it), then each module met in a frame without a line.
  REQUIRE(p.mappings == std::vector<std::string>{"/usr/bin/prog", "/opt/lib/libfoo.so"});
  std::map<std::string, const Sample*> by;
  for (const auto& smp : p.samples)
    by[smp.stack.at(0).name + "@" + smp.labels.at("device") + "/" +
       (smp.labels.count("category") ? smp.labels.at("category") : "")] = &smp;
  // Device 1's allocation: at the peak with its entry's category, at exit from its segment (the
  // model's live_at_exit has no category for it), so two samples.
  REQUIRE(by.size() == 5);
  const Sample& foo = *by.at("foo_alloc@cuda:0/");
  REQUIRE(foo.stack.size() == 2);
  REQUIRE(foo.stack[0].mapping == "/opt/lib/libfoo.so");
  REQUIRE(foo.stack[1].name == "main");
  REQUIRE(foo.stack[1].mapping.empty());  // its module is not known (it has a source line)
  REQUIRE(foo.values == std::vector<int64_t>{0, 0, 1, 200, 1, 200});
  const Sample& py = *by.at("forward@cuda:0/");
  REQUIRE(py.stack.size() == 4);  // every library frame above the user's line is kept
  REQUIRE(py.stack[0].line == 134);
  REQUIRE(py.stack[1].name == "Module._wrapped_call_impl");
  REQUIRE(py.stack[2].name == "step");
  REQUIRE(py.stack[2].line == 76);
  REQUIRE(py.stack[3].name == "<module>");  // a Python name is never folded
  REQUIRE(py.values == std::vector<int64_t>{0, 0, 1, 300, 1, 300});
  REQUIRE(py.labels.at("module") == "h.0.mlp");
  REQUIRE(foo.labels.count("module") == 0);
  const Sample& none = *by.at(std::string(analysis::kNoStackSite) + "@cuda:0/");
  REQUIRE(none.stack.size() == 1);
  REQUIRE(none.values == std::vector<int64_t>{0, 0, 1, 100, 1, 100});
  const Sample& lib = *by.at("foo_alloc@cuda:1/library");
  REQUIRE(lib.values == std::vector<int64_t>{0, 0, 0, 0, 1, 400});
  (void)by.at("foo_alloc@cuda:1/");  // live at exit: the segment's own sample, no category
}

TEST_CASE("pprof: the real PyTorch fixture's sites carry report's bytes at the peak and exit") {
  // report's rows, line by line: a row is its site frame and, where the user's line called a
  // library, the library's frame that made the request ("via"); in pprof that row is a leaf (the
  // library's frame) and the site frame calling it.
  const auto s = snap::read_snapshot_any(testing::kTorchPickle);
  const analysis::SiteTable sites(s);
  const analysis::Report r = analysis::build_report(s, sites, "fixture");
  const Profile p = parse(viz::pprof_profile(s));
  REQUIRE(r.devices.size() == 1);
  int64_t peak = 0, inuse = 0, alloc = 0, python_leaves = 0, modules = 0, vias = 0;
  const auto key = [](const std::string& name, const std::string& file, int64_t line) {
    return name + " " + file + ":" + std::to_string(line);
  };
  std::map<std::string, int64_t> profile_peak, report_peak;
  for (const auto& smp : p.samples) {
    peak += smp.values[5];
    inuse += smp.values[3];
    alloc += smp.values[1];
    const Frame& leaf = smp.stack.at(0);
    if (leaf.file.ends_with(".py")) ++python_leaves;
    for (const auto& f : smp.stack) modules += f.name == "<module>";
    if (!smp.values[5]) continue;
    // The recorded name: a native frame's system name, a Python frame's own (it has no other).
    const auto recorded = [](const Frame& f) {
      return f.system_name.empty() ? f.name : f.system_name;
    };
    std::string k = key(recorded(leaf), leaf.file, leaf.line);
    // A library's Python leaf: the row is named by the user's frame that called it too.
    if (analysis::is_library_python(snap::Frame{leaf.file, leaf.line, leaf.name})) {
      for (const auto& f : smp.stack) {
        if (f.file.ends_with(".py") &&
            !analysis::is_library_python(snap::Frame{f.file, f.line, f.name})) {
          k = key(recorded(f), f.file, f.line) + " via " + k;
          ++vias;
          break;
        }
      }
    }
    profile_peak[k] += smp.values[5];
  }
  const auto& d = r.devices[0];
  REQUIRE(peak == static_cast<int64_t>(d.timeline.trace.bytes));
  REQUIRE(inuse == static_cast<int64_t>(d.live_at_exit_bytes));
  uint64_t requested = 0;
  for (const auto& site : r.top_by_bytes) requested += site.bytes;
  REQUIRE(alloc == static_cast<int64_t>(requested));
  REQUIRE(python_leaves > 0);
  REQUIRE(modules > 0);  // the script's top level keeps its name
  REQUIRE(vias > 0);     // the fixture's rows name the library frames they came through
  // Every row report lists at the peak, with its bytes, and nothing else.
  for (const auto& row : d.at_peak) {
    const int site = row.stack < 0 ? -1 : sites.site_frame(row.stack);
    if (site < 0) {
      report_peak[key(row.site, "", 0)] += static_cast<int64_t>(row.bytes);
      continue;
    }
    const auto& st = s.stacks.at(static_cast<size_t>(row.stack));
    const snap::Frame& f = st.at(static_cast<size_t>(site));
    // An unknown file ("??") is written as none.
    std::string k = key(f.name, f.filename == "??" ? "" : f.filename, f.line);
    if (const int via = analysis::via_frame_index(st, site); via >= 0) {
      const snap::Frame& v = st.at(static_cast<size_t>(via));
      k += " via " + key(v.name, v.filename, v.line);
    }
    report_peak[k] += static_cast<int64_t>(row.bytes);
  }
  if (d.at_peak_cached && *d.at_peak_cached)
    report_peak[key(analysis::kCachedFreeLabel, "", 0)] += static_cast<int64_t>(*d.at_peak_cached);
  REQUIRE(report_peak.size() > 3);
  const auto show = [](const std::map<std::string, int64_t>& m) {
    std::string out;
    for (const auto& [k, v] : m) out += k + " = " + std::to_string(v) + "\n";
    return out;
  };
  REQUIRE(show(profile_peak) == show(report_peak));
}
