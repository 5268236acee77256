// Contract: the in-memory form of a snapshot file, shared by everything on the collector side.
// The live collector builds it from ring events, the JSON writer writes it, the readers rebuild it
// from a cumemtrace or PyTorch snapshot, and the analysis commands only ever look at this form.
// It mirrors PyTorch's memory-history layout (see schemas/snapshot.schema.json): stacks are
// interned once in `stacks` and referenced by index, so identical stacks cost one copy.
// A device has two unit watermarks (analysis/watermark.h), neither overriding the other: the
// replay's highest point of `device_traces`, and the tool section's DeviceSummary (the
// collector's running count over every event, also those a capped trace dropped, and
// cuMemCreate'd memory that has no trace entry). Reports show the higher and name the other;
// `check --max-peak-bytes` judges the higher and says whose it is, so capping the trace never
// hides a peak.
// Growth is measured in `device_traces` at marks (`annotations`) or step ends, so a mark older
// than the oldest kept entry (trace_entries_dropped > 0) cannot be measured.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cumemtrace::snap {

inline constexpr int kSchemaVersion = 1;
inline constexpr int32_t kNoStack = -1;

struct Frame {
  // A constructor, not an aggregate: frames are written {file, line, name} everywhere, and
  // `module` is set on the few that have one.
  Frame() = default;
  Frame(std::string f, int64_t l, std::string n, std::string m = {})
      : filename(std::move(f)), line(l), name(std::move(n)), module(std::move(m)) {}
  std::string filename;
  int64_t line = 0;
  std::string name;
  // A Python frame of a module call (torch.nn.Module._wrapped_call_impl): the fully qualified name
  // of the module it calls (the root: its class name), as cumemtrace_modules.py named it. Empty on
  // every other frame; JSON key "module", only where set (PyTorch's viewer ignores it).
  std::string module;
  bool operator==(const Frame&) const = default;
};

using Stack = std::vector<Frame>;  // innermost first

enum class Action : uint8_t {
  kAlloc,
  kFreeRequested,
  kFreeCompleted,
  kSegmentAlloc,
  kSegmentFree,
  kSegmentMap,
  kSegmentUnmap,
  kSnapshot,
  kOom,
};

// Where an entry or segment comes from: cumemtrace's driver hooks, PyTorch's caching allocator
// (its TraceEntry actions with PyTorch's meaning; JSON key "source": "pytorch"), or CUDA graph
// memory (driver-level allocations that graph memory nodes made when their graph was launched,
// and their frees; "source": "graph"). Absent = driver. Graph memory counts like any driver
// allocation: a launched graph's allocation nobody freed is a leak.
enum class Source : uint8_t { kDriver, kPytorch, kGraph };

std::string_view action_name(Action a);
std::optional<Action> parse_action(std::string_view s);

// What a byte is for, in a PyTorch user's terms (docs/pytorch.md, "Categories"). Tensors (PyTorch's
// alloc/free entries) get one of the first eight; kLibrary marks a driver-level allocation of the
// program or another library (cuBLAS, NCCL...). PyTorch's segment events (reserved memory: the
// cache, not any tensor's) are written "unknown": memory_viz colours only tensor events, and it
// needs an event named "unknown" whenever any event has a category (torch-snapshot-format
// reference, trap 3). kNone: not labelled (PyTorch's own files, runs without the automatic
// phases); nothing is written then. JSON key "category", the names below.
enum class Category : uint8_t {
  kNone,
  kParameter,
  kGradient,
  kOptimizerState,
  kActivation,
  kTemporary,
  kInput,
  kAutograd,
  kUnknown,
  kLibrary,
  kProgram,  // "program": a tensor the program made outside every phase and keeps (not an input)
  kParameterUnsharded,  // "parameter_unsharded": FSDP2's all-gathered parameters while they live
  kCublasWorkspace,     // "cublas_workspace": cuBLAS/cuBLASLt workspaces torch keeps per handle
                        // and stream (at::cuda::cublas[lt]_handle_stream_to_workspace)
  kCommunication,       // "communication": FSDP2's all-gather and reduce-scatter flat buffers,
                        // DDP's gradient buckets
  kKvCache,             // "kv_cache": the keys and values a model's forward returned under
                        // no_grad for its next forward (transformers' Cache: generate)
};
std::string_view category_name(Category c);  // "" for kNone
std::optional<Category> parse_category(std::string_view s);

struct TraceEntry {
  Action action = Action::kAlloc;
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t stream = 0;
  int64_t time_us = 0;
  int32_t stack = kNoStack;        // index into Snapshot::stacks
  uint64_t device_free = 0;        // oom only
  uint32_t tid = 0;                // 0 when unknown (PyTorch files)
  bool stream_per_thread = false;  // stream 0 meant the per-thread default stream (_ptsz API)
  Source source = Source::kDriver;
  bool async_pool = false;  // segment_alloc/alloc from a stream-ordered pool (cuMemAllocAsync, ...)
  Category category = Category::kNone;  // see Category; set by analysis::label_categories
  // PyTorch's block for an alloc/free_requested/free_completed of its caching allocator, in
  // units of its 512 B minimum block (block_size()): the bytes memory_allocated() counts for it
  // (rounded, an unsplit remainder included). Never written or read from a file: set by
  // analysis::label_block_sizes from the replay of the recorded allocator; 0 = not known (the
  // requested `size` stands). 32 bits of 512 B hold 2 TiB.
  uint32_t block_units = 0;
};

inline constexpr uint64_t kBlockUnit = 512;  // PyTorch's kMinBlockSize
inline uint64_t block_size(const TraceEntry& e) {
  return uint64_t{e.block_units} * kBlockUnit;
}
// The bytes an entry holds for PyTorch's counters: its block where known, else its size.
inline uint64_t held_bytes(const TraceEntry& e) {
  return e.block_units ? block_size(e) : e.size;
}

// Whether a writer puts `frames` on this entry (JSON and pickle alike): cumemtrace's driver
// entries carry them where they say who asked for memory (alloc, oom, segment_map: PyTorch records
// frames with segment_map too, and for VMM users such as NCCL it is the only entry that does);
// PyTorch's own entries carry them on every action that has a stack.
inline bool writes_frames(const TraceEntry& e) {
  if (e.source == Source::kPytorch) return e.stack != kNoStack;
  return e.action == Action::kAlloc || e.action == Action::kOom || e.action == Action::kSegmentMap;
}

// memory_viz cannot open a file in which some trace entry has a category and none is "unknown"
// (torch-snapshot-format reference, §2.1.5 trap 3). Labelling puts "unknown" on PyTorch's segment
// events; for a snapshot labelled otherwise, both writers (JSON and pickle) write "unknown" on the
// entry this names: the first one without a category that the viewer does not fold into the
// entry before it (a free_completed), else the first such entry at all (its own category is lost
// in the file: one event coloured "unknown" rather than a file the viewer refuses), else the first
// entry. Nothing when no entry has a category or one is already kUnknown.
struct EntryIndex {
  size_t device = 0, index = 0;
  bool operator==(const EntryIndex&) const = default;
};
struct Snapshot;
std::optional<EntryIndex> unknown_category_stand_in(const Snapshot& s);

// Whether the snapshot shows a process that never used CUDA, so that no limit can be judged on
// it: no trace entry and no segment (PyTorch's own files have nothing else), and a tool section
// with no device event (events_total counts only those), no device summary, VMM handle, imported
// mapping, pinned host allocation, anomaly, pool sample, graph reading, driver-visible memory or
// CUDA context (a context is listed where NVML measured it), and no entry dropped. A snapshot
// with dropped events or a broken ring is never said to be one: what it lost may have been CUDA.
// A run that used CUDA and freed everything is not one (its trace holds the frees).
bool never_used_cuda(const Snapshot& s);

struct Block {
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t requested_size = 0;
  std::string state = "active_allocated";
  int32_t stack = kNoStack;
};

struct Segment {
  int device = 0;
  uint64_t address = 0;
  uint64_t total_size = 0;
  uint64_t allocated_size = 0;
  uint64_t active_size = 0;
  uint64_t requested_size = 0;
  uint64_t stream = 0;
  std::string segment_type = "large";
  bool is_expandable = false;
  // segment_pool_id other than (0, 0): a private pool's segment (a CUDA graph's capture or a
  // MemPool's). Written back as (1, 0): the ids themselves are not kept.
  bool private_pool = false;
  int32_t stack = kNoStack;
  std::vector<Block> blocks;
  Source source = Source::kDriver;
};

struct Annotation {  // PyTorch's external_annotations entry
  std::string name;
  std::string stage;  // "START", "END" or "MARK"
  int device = 0;
  int64_t time_us = 0;
};

struct DeviceSummary {
  int device = 0;
  uint64_t peak_bytes = 0;
  int64_t peak_time_us = 0;
  uint64_t live_bytes = 0;
  uint64_t allocations = 0;
  uint64_t frees = 0;
  // The driver's physical memory for CUDA graphs on this device (cuDeviceGetGraphMemAttribute
  // RESERVED_MEM_CURRENT): the latest reading and the highest one. Graph allocations live inside
  // it; the rest is the driver's cache for later launches. 0 without graph memory nodes.
  uint64_t graph_reserved_bytes = 0;
  uint64_t graph_reserved_peak_bytes = 0;
};

struct Ended {
  std::string how = "running";  // "exit", "signal", "vanished" (died, cause unknown), "running"
  int code = 0;                 // exit status when how == "exit"
  int signal = 0;               // signal number when how == "signal"
};

struct VmmHandle {  // cuMemCreate'd physical memory still held
  uint64_t handle = 0;
  uint64_t size = 0;
  int device = 0;
  int32_t stack = kNoStack;
  int64_t time_us = 0;
};

struct ImportedMapping {  // a mapping of memory another process owns (imported VMM handle)
  uint64_t addr = 0;
  uint64_t size = 0;
  int device = 0;
  uint64_t handle = 0;
  int32_t stack = kNoStack;
  int64_t time_us = 0;
};

struct HostAllocation {  // pinned host memory still held
  uint64_t addr = 0;
  uint64_t size = 0;
  std::string api;
  int32_t stack = kNoStack;
  int64_t time_us = 0;
};

struct Anomaly {
  std::string kind;  // "free_unknown_pointer", "double_free", "release_unknown_handle", ...
  uint64_t addr = 0;
  std::string api;
  int32_t stack = kNoStack;
  int64_t time_us = 0;
  uint32_t tid = 0;
};

struct DriverMemorySample {  // per-process device memory as the driver (NVML) reports it
  int64_t time_us = 0;
  int device = 0;
  uint64_t used_bytes = 0;
};

struct PoolMemorySample {  // a stream-ordered memory pool as the driver reports it
  int64_t time_us = 0;
  int device = 0;
  uint64_t pool = 0;  // the pool's handle
  uint64_t reserved_bytes = 0;
  uint64_t used_bytes = 0;
};

// A CUDA context and what it costs on its device, measured when it was created: the process's
// memory on the device as the driver reported it (NVML) right after the creation, less what the
// trace held there at that moment (normally nothing) and what the contexts already in being on
// the device were measured at. Only contexts the collector could measure are listed.
struct ContextMemory {
  int device = 0;
  uint64_t bytes = 0;
  int64_t time_us = 0;
  int64_t end_time_us = 0;  // when it was destroyed; 0 while it is in being
  std::string api;          // "cuDevicePrimaryCtxRetain" or "cuCtxCreate"
  uint64_t handle = 0;      // the CUcontext
  // Whether the context is in being at `time_us`.
  bool live_at(int64_t t) const { return time_us <= t && (end_time_us == 0 || t < end_time_us); }
};

// What the model and optimizer own, as the automatic phases' ownership walk found it at one
// moment (preload/python/cumemtrace_phases.py, wire Kind::kTorchOwners): the data pointers and byte
// sizes of every parameter, gradient (`.grad`) or optimizer state tensor. A walk of a role replaces
// that role's previous walk. The collector joins them by address with the PyTorch blocks live at
// `time_us` (pytorch/categories.h).
// kInput: the tensors passed to a root module's forward (positional and keyword arguments, one
// level into lists, tuples and dicts), walked at its start. kParameterUnsharded: FSDP2's
// all-gathered (unsharded) parameters, walked when a parameter group has gathered them.
// kCublasWorkspace: the workspaces torch's cuBLAS handle pool keeps (one per handle and stream,
// allocated through the caching allocator at a thread's first cuBLAS call and kept), read from
// torch's own workspace maps (preload/python/cumemtrace_workspaces.py); bytes 0 (the block says).
// kCommunication: FSDP2's flat all-gather inputs/outputs and reduce-scatter buffers of a
// parameter group, walked after its all-gather and reduce-scatter. kKvCache: the KV cache a root
// module's forward returned under no_grad (transformers' Cache: generate, inference loops).
enum class OwnerRole : uint8_t {
  kParameter = 1,
  kGradient = 2,
  kOptimizerState = 3,
  kInput = 4,
  kParameterUnsharded = 5,
  kCublasWorkspace = 6,
  kCommunication = 7,
  kKvCache = 8,
};
// "parameter", "gradient", "optimizer_state", "input", "parameter_unsharded",
// "cublas_workspace", "communication", "kv_cache"
std::string_view owner_role_name(OwnerRole r);
std::optional<OwnerRole> parse_owner_role(std::string_view s);

struct OwnerWalk {
  int64_t time_us = 0;
  OwnerRole role = OwnerRole::kParameter;
  std::vector<std::pair<uint64_t, uint64_t>> tensors;  // (data pointer, bytes)
};

// The names of the tensors an ownership walk listed (preload/python/cumemtrace_modules.py, wire
// Kind::kTorchNames): by data pointer (decimal, the map's key), the fully qualified name of the
// parameter a parameter, gradient or optimizer state tensor belongs to, as of `time_us`; a table of
// a role replaces that role's previous one. The "by module" view (pytorch/modules.h) joins them
// with the walks by address.
struct TensorNames {
  int64_t time_us = 0;
  OwnerRole role = OwnerRole::kParameter;
  std::map<std::string, std::string> names;  // data pointer -> parameter name
};

// PyTorch's allocator configuration from `time_us` on: PYTORCH_ALLOC_CONF (else
// PYTORCH_CUDA_ALLOC_CONF) as the program started with it, then each
// torch.cuda.memory._set_allocator_settings() call (the text it was given applies on top).
struct AllocatorConfChange {
  int64_t time_us = 0;
  std::string alloc_conf;
};

// A per-process memory fraction from `time_us` on (torch.cuda.set_per_process_memory_fraction, or
// found in force when the capture attached): `allowed_bytes` is PyTorch's own limit on what it
// reserves on the device, fraction x the device's total memory.
struct MemoryFractionChange {
  int64_t time_us = 0;
  int device = 0;
  std::string fraction;  // as Python printed it ("0.25")
  uint64_t allowed_bytes = 0;
  uint64_t device_total = 0;
};

// A private pool PyTorch's allocator served requests from, from `time_us` on: "cuda_graph" (a
// CUDA graph's capture: torch.cuda.graph / CUDAGraph.capture_begin) or "mempool" (a MemPool
// made current by torch.cuda.use_mem_pool). Its segments are kept apart from the default pools.
struct PrivatePoolUse {
  int64_t time_us = 0;
  std::string kind;
};

struct PytorchInfo {  // what the capture of PyTorch's allocator found (the tool section's
                      // "pytorch")
  std::string version, backend, capture, why;  // capture: "blocks" | "driver" | "off"
  bool expandable_segments = false;
  // The allocator's settings, in time order (empty in snapshots of cumemtrace before 0.x: then
  // only expandable_segments is known).
  std::vector<AllocatorConfChange> alloc_confs{};
  std::vector<MemoryFractionChange> memory_fractions{};
  std::vector<PrivatePoolUse> private_pools{};
};

struct ToolSection {  // the "cumemtrace" object; absent in PyTorch's own snapshots
  int schema_version = kSchemaVersion;
  std::string tool_version;
  int pid = 0;
  int ppid = 0;
  std::string exe;
  std::vector<std::string> argv;
  std::string hostname;
  std::map<std::string, std::string> rank;  // RANK, LOCAL_RANK, WORLD_SIZE... when set
  int64_t start_time_us = 0;
  int64_t end_time_us = 0;
  std::string reason = "exit";  // why this file was written: "exit", "oom", "signal", "request",
                                // "periodic"
  std::string tag;  // request/periodic snapshots: the file name's tag ("request-2", the tag
                    // given to cumemtrace_snapshot); empty otherwise
  Ended ended;
  uint64_t events_total = 0;
  uint64_t events_dropped = 0;
  // Why the collector stopped reading the process's ring before its end (a corrupt record):
  // everything after it is missing. Empty when the ring was read to the end.
  std::string ring_error;
  // How finely the events' times were read: the kernel tick's length where the program ran with
  // --clock coarse (CLOCK_MONOTONIC_COARSE); 0 for the precise clock (the TSC or CLOCK_MONOTONIC).
  uint64_t time_resolution_ns = 0;
  uint64_t trace_entries_dropped = 0;  // oldest trace entries discarded by --max-trace-events
  std::vector<DeviceSummary> devices;
  std::vector<VmmHandle> vmm_handles;
  std::vector<ImportedMapping> imported_mappings;
  std::vector<HostAllocation> host_allocations;
  std::vector<Anomaly> anomalies;
  std::map<std::string, std::string> threads;     // tid -> name
  std::vector<DriverMemorySample> driver_memory;  // empty without NVML
  std::vector<PoolMemorySample> pool_memory;      // empty when no pool allocation was made
  std::vector<ContextMemory> contexts;            // empty when none was measured
  std::optional<PytorchInfo> pytorch;             // present when the target imported torch
  std::vector<OwnerWalk> ownership;               // empty without the automatic phases
  std::vector<TensorNames> tensor_names;          // empty without module names
};

struct Snapshot {
  std::vector<Segment> segments;
  std::vector<std::vector<TraceEntry>> device_traces;  // index = device ordinal
  std::vector<Stack> stacks;
  std::vector<Annotation> annotations;
  std::map<std::string, std::string> allocator_settings;
  std::optional<ToolSection> tool;
};

}  // namespace cumemtrace::snap
