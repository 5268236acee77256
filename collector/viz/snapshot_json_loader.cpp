#include "viz/snapshot_json_loader.h"

#include <fstream>
#include <stdexcept>
#include <unordered_map>

namespace cumemtrace::viz {

namespace {

using nlohmann::json;

uint64_t u64(const json& o, const char* k) {
  auto it = o.find(k);
  if (it == o.end() || !it->is_number()) return 0;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (it->is_number_integer()) return static_cast<uint64_t>(it->get<int64_t>());
  return static_cast<uint64_t>(it->get<double>());
}

int64_t i64(const json& o, const char* k) {
  auto it = o.find(k);
  if (it == o.end() || !it->is_number()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  return static_cast<int64_t>(it->get<double>());
}

std::string str(const json& o, const char* k, const char* fallback = "") {
  auto it = o.find(k);
  return it != o.end() && it->is_string() ? it->get<std::string>() : fallback;
}

const json& array(const json& o, const char* k) {
  static const json kEmpty = json::array();
  auto it = o.find(k);
  return it != o.end() && it->is_array() ? *it : kEmpty;
}

class Stacks {
 public:
  explicit Stacks(snap::Snapshot& s) : s_(s) {}
  int32_t intern(const json& frames) {
    if (!frames.is_array() || frames.empty()) return snap::kNoStack;
    std::string key = frames.dump();
    if (auto it = ids_.find(key); it != ids_.end()) return it->second;
    snap::Stack st;
    for (const auto& f : frames)
      if (f.is_object()) st.push_back({str(f, "filename"), i64(f, "line"), str(f, "name")});
    const auto id = static_cast<int32_t>(s_.stacks.size());
    s_.stacks.push_back(std::move(st));
    ids_.emplace(std::move(key), id);
    return id;
  }

 private:
  snap::Snapshot& s_;
  std::unordered_map<std::string, int32_t> ids_;
};

}  // namespace

snap::Snapshot snapshot_from_json(const json& j, const std::string& name) {
  if (!j.is_object() || !j.contains("device_traces"))
    throw std::runtime_error(name + ": not a memory snapshot (no device_traces)");
  snap::Snapshot s;
  Stacks stacks(s);
  for (const auto& g : array(j, "segments")) {
    if (!g.is_object()) continue;
    snap::Segment seg;
    seg.device = static_cast<int>(i64(g, "device"));
    seg.address = u64(g, "address");
    seg.total_size = u64(g, "total_size");
    seg.allocated_size = u64(g, "allocated_size");
    seg.active_size = u64(g, "active_size");
    seg.requested_size = u64(g, "requested_size");
    seg.stream = u64(g, "stream");
    seg.segment_type = str(g, "segment_type", "large");
    seg.is_expandable = g.value("is_expandable", false);
    seg.stack = stacks.intern(array(g, "frames"));
    for (const auto& b : array(g, "blocks")) {
      if (!b.is_object()) continue;
      seg.blocks.push_back({u64(b, "address"), u64(b, "size"), u64(b, "requested_size"),
                            str(b, "state", "inactive"), stacks.intern(array(b, "frames"))});
    }
    s.segments.push_back(std::move(seg));
  }
  for (const auto& tr : array(j, "device_traces")) {
    auto& out = s.device_traces.emplace_back();
    if (!tr.is_array()) continue;
    for (const auto& e : tr) {
      if (!e.is_object()) continue;
      const auto action = snap::parse_action(str(e, "action"));
      if (!action) continue;
      snap::TraceEntry t;
      t.action = *action;
      t.addr = u64(e, "addr");
      t.size = u64(e, "size");
      t.stream = u64(e, "stream");
      t.time_us = i64(e, "time_us");
      t.device_free = u64(e, "device_free");
      t.tid = static_cast<uint32_t>(u64(e, "tid"));
      t.stack = stacks.intern(array(e, "frames"));
      out.push_back(t);
    }
  }
  for (const auto& a : array(j, "external_annotations")) {
    if (!a.is_object()) continue;
    s.annotations.push_back(
        {str(a, "name"), str(a, "stage"), static_cast<int>(i64(a, "device")), i64(a, "time_us")});
  }
  if (auto it = j.find("allocator_settings"); it != j.end() && it->is_object())
    for (const auto& [k, v] : it->items())
      s.allocator_settings[k] = v.is_string() ? v.get<std::string>() : v.dump();
  if (auto it = j.find("cumemtrace"); it != j.end() && it->is_object()) {
    const json& t = *it;
    snap::ToolSection tool;
    tool.tool_version = str(t, "tool_version");
    tool.pid = static_cast<int>(i64(t, "pid"));
    tool.ppid = static_cast<int>(i64(t, "ppid"));
    tool.exe = str(t, "exe");
    for (const auto& a : array(t, "argv"))
      if (a.is_string()) tool.argv.push_back(a.get<std::string>());
    tool.hostname = str(t, "hostname");
    tool.start_time_us = i64(t, "start_time_us");
    tool.end_time_us = i64(t, "end_time_us");
    tool.reason = str(t, "reason", "exit");
    if (auto e = t.find("ended"); e != t.end() && e->is_object())
      tool.ended = {str(*e, "how", "running"), static_cast<int>(i64(*e, "code")),
                    static_cast<int>(i64(*e, "signal"))};
    tool.events_total = u64(t, "events_total");
    tool.events_dropped = u64(t, "events_dropped");
    tool.ring_error = str(t, "ring_error");
    for (const auto& a : array(t, "anomalies")) {
      if (!a.is_object()) continue;
      tool.anomalies.push_back({str(a, "kind"), u64(a, "addr"), str(a, "api"),
                                stacks.intern(array(a, "frames")), i64(a, "time_us"),
                                static_cast<uint32_t>(u64(a, "tid"))});
    }
    s.tool = std::move(tool);
  }
  return s;
}

snap::Snapshot load_snapshot_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw std::runtime_error(path + ": not JSON: " + e.what());
  }
  return snapshot_from_json(j, path);
}

}  // namespace cumemtrace::viz
