// Contract: the fields of the snapshot's `cumemtrace` tool section (and of PyTorch's
// external_annotations), each described once: its JSON key, the model member it holds, its kind,
// whether a reader requires it and whether a writer writes it for this object. The JSON writer
// (snapshot_json_writer.cpp), the pickle writer (pickle_writer.cpp), the strict reader
// (snapshot_read_tool.cpp) and the schema test (tests/snapshot/fields_schema_test.cpp) all walk
// these tables; adding a field to the tool section touches the model (snapshot.h) and this file.
//
// Why member-pointer visitors (a `describe(obj, visitor)` per struct) rather than X-macros or a
// constexpr array: the visitor gets each member as a typed reference, so the writers pick the
// encoding from the C++ type and recurse into nested structs with no casts or void pointers, the
// table stays ordinary C++ a reader can step through, and `write` can depend on the object
// (graph_reserved_bytes goes out with graph_reserved_peak_bytes). Order is the order written.
//
// The parts of PyTorch's own format with rules of their own (segments, blocks, trace entries:
// "source" only in cumemtrace's files, oom entries with device_free for addr, frames on some
// actions, the memory_viz category stand-in) are still written and read by hand.
#pragma once

#include <array>
#include <concepts>
#include <optional>
#include <string_view>
#include <type_traits>
#include <vector>

#include "snapshot/snapshot.h"

namespace cumemtrace::snap::fields {

enum class Kind : uint8_t {
  kCount,          // uint64_t: an integer 0..2^53-1
  kTime,           // int64_t microseconds: an integer 0..2^53-1
  kDevice,         // int: a device ordinal below 4096
  kInt32,          // int: any 32-bit integer
  kTid,            // uint32_t: a thread id
  kSchemaVersion,  // int: must be kSchemaVersion
  kString,         // std::string
  kBool,           // bool
  kFrames,         // int32_t index into Snapshot::stacks, written as that stack's frame list
  kRole,           // OwnerRole, by its name
  kStrings,        // std::vector<std::string>
  kStringMap,      // std::map<std::string, std::string>, written by for_each_distinct_key
  kPairs,          // std::vector<std::pair<uint64_t, uint64_t>>, each a [pointer, bytes] array
  kObject,         // a described struct, or std::optional of one
  kList,           // std::vector of a described struct
};

struct Field {
  std::string_view key;
  Kind kind;
  bool required = true;  // the reader fails on an object without it
  bool write = true;     // the writers put it out for this object
  // Strings: the values the reader accepts (empty: any) and its message for another value;
  // kTime with nonzero: 0 is refused with that message.
  const std::string_view* one_of = nullptr;
  size_t one_of_count = 0;
  bool nonzero = false;
  std::string_view invalid = {};
};

constexpr Field req(std::string_view key, Kind kind) {
  return Field{key, kind};
}
// Optional on reading; written when `write` (usually: when not the default).
constexpr Field opt(std::string_view key, Kind kind, bool write) {
  return Field{key, kind, false, write};
}
template <size_t N>
constexpr Field one_of(Field f, const std::array<std::string_view, N>& values,
                       std::string_view invalid) {
  f.one_of = values.data();
  f.one_of_count = N;
  f.invalid = invalid;
  return f;
}

// For the walkers: which members hold an optional object or a list.
template <typename T>
struct is_optional : std::false_type {};
template <typename T>
struct is_optional<std::optional<T>> : std::true_type {};
template <typename T>
struct is_vector : std::false_type {};
template <typename T>
struct is_vector<std::vector<T>> : std::true_type {};

inline constexpr std::array<std::string_view, 3> kStages = {"START", "END", "MARK"};
inline constexpr std::array<std::string_view, 2> kContextApis = {"cuDevicePrimaryCtxRetain",
                                                                 "cuCtxCreate"};

// `describe(obj, v)` calls v(field, member) for each field of obj, in the order written; obj may
// be const (writers) or not (the reader).
#define CT_DESCRIBE(Type, obj)                        \
  template <typename T, typename V>                   \
  requires std::same_as<std::remove_const_t<T>, Type> \
  void describe(T& obj, V&& v)

CT_DESCRIBE(Annotation, a) {
  v(req("name", Kind::kString), a.name);
  v(one_of(req("stage", Kind::kString), kStages, "expected stage START, END or MARK"), a.stage);
  v(req("device", Kind::kDevice), a.device);
  v(req("time_us", Kind::kTime), a.time_us);
}

CT_DESCRIBE(Ended, e) {
  v(req("how", Kind::kString), e.how);
  v(req("code", Kind::kInt32), e.code);
  v(req("signal", Kind::kInt32), e.signal);
}

CT_DESCRIBE(DeviceSummary, d) {
  v(req("device", Kind::kDevice), d.device);
  v(req("peak_bytes", Kind::kCount), d.peak_bytes);
  v(req("peak_time_us", Kind::kTime), d.peak_time_us);
  v(req("live_bytes", Kind::kCount), d.live_bytes);
  v(req("allocations", Kind::kCount), d.allocations);
  v(req("frees", Kind::kCount), d.frees);
  // Only where the process made graph memory nodes: both go out with the peak.
  const bool graphs = d.graph_reserved_peak_bytes != 0;
  v(opt("graph_reserved_bytes", Kind::kCount, graphs), d.graph_reserved_bytes);
  v(opt("graph_reserved_peak_bytes", Kind::kCount, graphs), d.graph_reserved_peak_bytes);
}

CT_DESCRIBE(VmmHandle, h) {
  v(req("handle", Kind::kCount), h.handle);
  v(req("size", Kind::kCount), h.size);
  v(req("device", Kind::kDevice), h.device);
  v(req("time_us", Kind::kTime), h.time_us);
  v(req("frames", Kind::kFrames), h.stack);
}

CT_DESCRIBE(ImportedMapping, m) {
  v(req("addr", Kind::kCount), m.addr);
  v(req("size", Kind::kCount), m.size);
  v(req("device", Kind::kDevice), m.device);
  v(req("handle", Kind::kCount), m.handle);
  v(req("time_us", Kind::kTime), m.time_us);
  v(req("frames", Kind::kFrames), m.stack);
}

CT_DESCRIBE(HostAllocation, h) {
  v(req("addr", Kind::kCount), h.addr);
  v(req("size", Kind::kCount), h.size);
  v(req("time_us", Kind::kTime), h.time_us);
  v(req("api", Kind::kString), h.api);
  v(req("frames", Kind::kFrames), h.stack);
}

CT_DESCRIBE(Anomaly, a) {
  v(req("kind", Kind::kString), a.kind);
  v(req("addr", Kind::kCount), a.addr);
  v(req("time_us", Kind::kTime), a.time_us);
  v(req("tid", Kind::kTid), a.tid);
  v(req("api", Kind::kString), a.api);
  v(req("frames", Kind::kFrames), a.stack);
}

CT_DESCRIBE(DriverMemorySample, m) {
  v(req("time_us", Kind::kTime), m.time_us);
  v(req("device", Kind::kDevice), m.device);
  v(req("used_bytes", Kind::kCount), m.used_bytes);
}

CT_DESCRIBE(PoolMemorySample, m) {
  v(req("time_us", Kind::kTime), m.time_us);
  v(req("device", Kind::kDevice), m.device);
  v(req("pool", Kind::kCount), m.pool);
  v(req("reserved_bytes", Kind::kCount), m.reserved_bytes);
  v(req("used_bytes", Kind::kCount), m.used_bytes);
}

CT_DESCRIBE(ContextMemory, c) {
  v(req("device", Kind::kDevice), c.device);
  v(req("bytes", Kind::kCount), c.bytes);
  v(req("time_us", Kind::kTime), c.time_us);
  Field end = opt("end_time_us", Kind::kTime, c.end_time_us != 0);  // once destroyed
  end.nonzero = true;
  end.invalid = "expected a positive end time";
  v(end, c.end_time_us);
  v(one_of(req("api", Kind::kString), kContextApis,
           "expected api \"cuDevicePrimaryCtxRetain\" or \"cuCtxCreate\""),
    c.api);
  v(req("handle", Kind::kCount), c.handle);
}

CT_DESCRIBE(OwnerWalk, w) {
  v(req("time_us", Kind::kTime), w.time_us);
  v(req("role", Kind::kRole), w.role);
  v(req("tensors", Kind::kPairs), w.tensors);
}

CT_DESCRIBE(TensorNames, w) {
  v(req("time_us", Kind::kTime), w.time_us);
  v(req("role", Kind::kRole), w.role);
  v(req("names", Kind::kStringMap), w.names);
}

CT_DESCRIBE(AllocatorConfChange, a) {
  v(req("time_us", Kind::kTime), a.time_us);
  v(req("alloc_conf", Kind::kString), a.alloc_conf);
}

CT_DESCRIBE(MemoryFractionChange, m) {
  v(req("time_us", Kind::kTime), m.time_us);
  v(req("device", Kind::kDevice), m.device);
  v(req("fraction", Kind::kString), m.fraction);
  v(req("allowed_bytes", Kind::kCount), m.allowed_bytes);
  v(req("device_total", Kind::kCount), m.device_total);
}

CT_DESCRIBE(PrivatePoolUse, u) {
  v(req("time_us", Kind::kTime), u.time_us);
  v(req("kind", Kind::kString), u.kind);
}

CT_DESCRIBE(PytorchInfo, p) {
  v(req("version", Kind::kString), p.version);
  v(req("backend", Kind::kString), p.backend);
  v(req("expandable_segments", Kind::kBool), p.expandable_segments);
  v(req("capture", Kind::kString), p.capture);
  v(req("why", Kind::kString), p.why);
  v(opt("alloc_confs", Kind::kList, !p.alloc_confs.empty()), p.alloc_confs);
  v(opt("memory_fractions", Kind::kList, !p.memory_fractions.empty()), p.memory_fractions);
  v(opt("private_pools", Kind::kList, !p.private_pools.empty()), p.private_pools);
}

CT_DESCRIBE(ToolSection, t) {
  v(req("schema_version", Kind::kSchemaVersion), t.schema_version);
  v(req("tool_version", Kind::kString), t.tool_version);
  v(req("pid", Kind::kInt32), t.pid);
  v(req("ppid", Kind::kInt32), t.ppid);
  v(req("exe", Kind::kString), t.exe);
  v(req("argv", Kind::kStrings), t.argv);
  v(req("hostname", Kind::kString), t.hostname);
  v(req("rank", Kind::kStringMap), t.rank);
  v(req("start_time_us", Kind::kTime), t.start_time_us);
  v(req("end_time_us", Kind::kTime), t.end_time_us);
  v(req("reason", Kind::kString), t.reason);
  v(opt("tag", Kind::kString, !t.tag.empty()), t.tag);  // request/periodic snapshots
  v(req("ended", Kind::kObject), t.ended);
  v(req("events_total", Kind::kCount), t.events_total);
  v(req("events_dropped", Kind::kCount), t.events_dropped);
  v(opt("ring_error", Kind::kString, !t.ring_error.empty()), t.ring_error);
  v(opt("time_resolution_ns", Kind::kCount, t.time_resolution_ns != 0), t.time_resolution_ns);
  v(req("trace_entries_dropped", Kind::kCount), t.trace_entries_dropped);
  v(req("devices", Kind::kList), t.devices);
  v(req("vmm_handles", Kind::kList), t.vmm_handles);
  // Always written; optional on reading: files from before VMM import support lack it.
  v(opt("imported_mappings", Kind::kList, true), t.imported_mappings);
  v(req("host_allocations", Kind::kList), t.host_allocations);
  v(req("anomalies", Kind::kList), t.anomalies);
  v(req("threads", Kind::kStringMap), t.threads);
  v(req("driver_memory", Kind::kList), t.driver_memory);
  v(opt("pool_memory", Kind::kList, !t.pool_memory.empty()), t.pool_memory);
  v(opt("contexts", Kind::kList, !t.contexts.empty()), t.contexts);
  v(opt("ownership", Kind::kList, !t.ownership.empty()), t.ownership);
  v(opt("tensor_names", Kind::kList, !t.tensor_names.empty()), t.tensor_names);
  v(opt("pytorch", Kind::kObject, t.pytorch.has_value()), t.pytorch);
}

#undef CT_DESCRIBE

}  // namespace cumemtrace::snap::fields
