// Contract: the shared-memory ring between the preloaded library (producers, any number of
// threads of one process) and the collector (one consumer). Both sides include this header; any
// change to a layout or meaning below bumps kWireVersion, and the collector refuses a ring of
// another version.
//
// Layout of the memfd: RingHeader (kHeaderBytes), then `capacity` slots of kSlotBytes each.
// A record is one header slot plus `extra_slots` continuation slots holding raw return addresses
// (stack) or bytes (strings). Producers reserve consecutive tickets with a CAS on `head` only
// when `head + n - tail <= capacity`, so a reserved slot is always free; they fill the payload
// and publish each slot by storing `seq = ticket + 1` (release). The consumer reads the slot of
// ticket `tail` once its seq says so, then advances `tail` (release). A stack record's extra
// slots hold `nframes` native return addresses (innermost first) followed by `npyframes` pairs
// (PyCodeObject address, line number) of the Python frames of the allocating thread, innermost
// first. The ticket is the global
// order of events across threads: a free takes its ticket before the real free runs, an
// allocation after the real allocation returned, so address reuse is never reordered.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace cumemtrace::wire {

inline constexpr uint32_t kMagic = 0x52544d43;  // "CMTR" little-endian
inline constexpr uint32_t kWireVersion = 11;
inline constexpr std::size_t kSlotBytes = 64;
inline constexpr std::size_t kPayloadBytes = 56;
inline constexpr std::size_t kFramesPerSlot = kPayloadBytes / sizeof(uint64_t);
inline constexpr std::size_t kHeaderBytes = 4096;
inline constexpr unsigned kMaxStackDepth = 128;
inline constexpr unsigned kMaxPythonFrames = 64;
inline constexpr unsigned kMaxExtraSlots = 64;  // bounds a record; the collector checks it
inline constexpr uint64_t kMinCapacity = 1024;
inline constexpr uint64_t kMaxCapacity = uint64_t{1} << 26;

enum class Kind : uint8_t {
  kAlloc = 1,       // device/managed memory: addr, size, device, stream
  kFree = 2,        // published before the real free runs
  kFreeFailed = 3,  // the real free behind the preceding kFree of addr failed: undo it
  kCreate = 4,      // cuMemCreate: addr = handle, size, device
  kRelease = 5,     // cuMemRelease: addr = handle
  kMap = 6,         // cuMemMap: addr = va, size, aux = handle
  kUnmap = 7,       // cuMemUnmap: addr = va, size
  kReserve = 8,     // cuMemAddressReserve: VA only, no memory
  kAddressFree = 9,
  kHostAlloc = 10,  // pinned host memory
  kHostFree = 11,
  kOom = 12,          // allocation failed with out-of-memory: size requested, aux = free bytes
  kAllocFailed = 13,  // allocation failed with another error (result)
  kModule = 14,       // loaded module: addr = load base; extra slots = path bytes (size = length)
  kThreadName = 15,   // tid names itself: extra slots = name bytes (size = length)
  kExit = 16,         // process called exit(): result = status
  kMark = 17,         // application mark/range: aux = MarkStage | range id << 8 (id 0 for
                      // push/pop: an END without a name closes the thread's innermost push;
                      // a start/end range's END names its START by id); extra slots = name
  kPyCode = 18,       // a Python code object first seen: aux = its address; extra slots =
                      // "filename\0name". An address may be announced again (reused by another
                      // code object): the latest announcement applies to the records after it
  kSnapshot = 19,     // cumemtrace_snapshot(tag): write a snapshot of the state at this record
                      // before releasing it; extra slots = tag bytes
  kDevice = 20,       // a CUDA ordinal's first event: aux = ordinal; extra slots = its PCI bus id
                      // (cuDeviceGetPCIBusId), to match the driver's per-device figures (NVML)
  kRetain = 21,       // cuMemRetainAllocationHandle: addr = handle (one more reference), aux = va
  kImport = 22,       // cuMemImportFromShareableHandle: addr = handle of memory another process
                      // (or allocation) owns, device = its location
  kTorchBlock = 23,   // one of PyTorch's caching-allocator TraceEntry records, with the stack of
                      // the thread that caused it: aux = TorchAction, addr, size, device, stream
                      // as PyTorch's TraceEntry has them (OOM: addr = free bytes, size = request)
  kTorchInfo = 24,    // what the capture of PyTorch's allocator found: extra slots = lines of
                      // "key=value" (version, backend, capture, expandable_segments, why)
  // CUDA graph memory. A graph's allocation node gets its address when the node is created;
  // memory exists from a launch of an executable graph holding the node until a free node,
  // cuMemFree or cuMemFreeAsync frees it. The collector keeps the graphs' nodes and applies them
  // at each launch (graph handles are opaque values: a destroyed handle may be reused).
  kGraphAllocNode = 25,    // allocation node added: addr = its address, size, device, aux = graph;
                           // api says how (cuGraphAddMemAllocNode, cuGraphAddNode, or
                           // cuMemAllocAsync / cuMemAllocFromPoolAsync into a capturing stream)
  kGraphFreeNode = 26,     // free node added: addr = what it frees, aux = graph
  kGraphInstantiate = 27,  // addr = executable graph, aux = graph, size = instantiate flags
  kGraphLaunch = 28,       // addr = executable graph, stream
  kGraphDestroy = 29,      // addr = graph (its nodes are forgotten, not freed)
  kGraphExecDestroy = 30,  // addr = executable graph (what its launches allocated stays live)
  kGraphMemReserved = 31,  // the driver's graph memory on `device` changed: size = reserved
                           // (CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT), aux = used
                           // (CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)
  kMapImported = 32,       // memory owned elsewhere mapped here: cuIpcOpenMemHandle (another
                           // process's allocation), cuExternalMemoryGetMappedBuffer (a buffer of
                           // imported external memory): addr, size, device. Listed, never counted
  kUnmapImported = 33,     // cuIpcCloseMemHandle: addr; published before the real call (a mapped
                           // external buffer is released by cuMemFree: a kFree of its address)
  kPoolUsage = 34,         // a stream-ordered memory pool as the driver reports it, sampled off the
                           // hot path (pool_sampler.h): addr = pool handle, device, size = reserved
                           // bytes (RESERVED_MEM_CURRENT), aux = bytes in use (USED_MEM_CURRENT)
  // CUDA contexts, whose memory the driver never reports through the allocation calls. A
  // creation is recorded only when the call made a context the process did not have before
  // (a primary context: inactive before the call, see cuDevicePrimaryCtxGetState); the thread
  // then waits until the collector consumed the record, so that the collector's NVML reading for
  // the process is taken before the thread allocates anything on it.
  kContextCreated = 35,    // device = CUDA ordinal (announced by kDevice before), aux = CUcontext,
                           // api = cuDevicePrimaryCtxRetain or cuCtxCreate
  kContextDestroyed = 36,  // after the context went away (the thread waits as for a creation,
                           // so that the collector reads the driver's figure without it):
                           // api = cuDevicePrimaryCtxRelease (the last reference) or
                           // cuDevicePrimaryCtxReset, device = its ordinal; api = cuCtxDestroy,
                           // aux = CUcontext, device = -1
  kTorchOwners = 37,       // what the model and optimizer own (the automatic phases' ownership
                           // walk, preload/python/cumemtrace_phases.py): aux = OwnerRole |
                           // kOwnersFirst; extra slots = (data pointer, bytes) uint64 pairs, size =
                           // their byte count. A walk of one role is one or more records, the first
                           // with kOwnersFirst (it replaces the role's previous walk)
  kRankInfo = 38,          // the process's rank as torch.distributed knows it (a
                           // torch.multiprocessing.spawn worker has no launcher variables): extra
                           // slots = lines of "key=value", keys torch.distributed.rank,
                           // .world_size, .local_rank; they join the tool section's `rank` map
  kTorchNames = 39,        // names the Python side gives (preload/python/cumemtrace_modules.py):
                           // aux = kNamesModules or an OwnerRole, | kOwnersFirst on a table's first
                           // record; extra slots = lines "<hex address> <name>\n" (modules: the
                           // module object's address and its fully qualified name; a role: a
                           // tensor's data pointer and its parameter's name), whole lines a record
};

// A Python frame of torch.nn.Module._wrapped_call_impl (the frame every module call makes, named
// by cumemtrace_torch_module_code) carries the module it calls in its line word: the tag in the
// top two bits (a plain line word is a non-negative line, or -1: top bits 00 or 11), the line in
// the 15 bits below them (capped), the module object's address (its first local, `self`) in the
// 47 bits below those (x86-64 user space). kTorchNames' modules table names the address.
inline constexpr uint64_t kPyModuleTag = uint64_t{2} << 62;
inline constexpr uint64_t kPyModuleTagMask = uint64_t{3} << 62;
inline constexpr unsigned kPyModuleLineShift = 47;
inline constexpr uint64_t kPyModuleLineMax = (uint64_t{1} << 15) - 1;
inline constexpr uint64_t kPyModulePointerMask = (uint64_t{1} << kPyModuleLineShift) - 1;

// kTorchNames' aux: what the table names (the module table, or the tensors of an ownership role:
// OwnerRole's numbers) and whether the record starts a table (kOwnersFirst: it replaces that
// role's previous table).
inline constexpr uint64_t kNamesModules = 0;

// kTorchOwners' aux: the role (snap::OwnerRole's numbers) and whether the record starts a walk.
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
inline constexpr uint64_t kOwnersFirst = 0x100;

// PyTorch's TraceEntry::Action (c10/core/CachingDeviceAllocator.h, torch >= 2.1).
enum class TorchAction : uint8_t {
  kAlloc = 0,
  kFreeRequested = 1,
  kFreeCompleted = 2,
  kSegmentAlloc = 3,
  kSegmentFree = 4,
  kSegmentMap = 5,
  kSegmentUnmap = 6,
  kSnapshot = 7,
  kOom = 8,
};

enum class Api : uint8_t {
  kNone = 0,
  kMemAlloc,
  kMemAllocPitch,
  kMemAllocManaged,
  kMemAllocAsync,
  kMemAllocFromPoolAsync,
  kMemFree,
  kMemFreeAsync,
  kMemCreate,
  kMemRelease,
  kMemMap,
  kMemUnmap,
  kMemAddressReserve,
  kMemAddressFree,
  kMemHostAlloc,
  kMemAllocHost,
  kMemFreeHost,
  kMemRetainAllocationHandle,
  kMemImportFromShareableHandle,
  kGraphAddMemAllocNode,
  kGraphAddMemFreeNode,
  kGraphAddNode,
  kGraphInstantiate,
  kGraphLaunch,
  kGraphDestroy,
  kGraphExecDestroy,
  kDeviceGraphMemTrim,
  kIpcOpenMemHandle,
  kIpcCloseMemHandle,
  kArrayCreate,    // arrays and external memory are device allocations (kAlloc / kFree) whose
  kArray3DCreate,  // addr is the CUarray / CUmipmappedArray / CUexternalMemory handle
  kMipmappedArrayCreate,
  kArrayDestroy,
  kMipmappedArrayDestroy,
  kImportExternalMemory,
  kDestroyExternalMemory,
  kExternalMemoryGetMappedBuffer,
  kDevicePrimaryCtxRetain,
  kCtxCreate,
  kDevicePrimaryCtxRelease,
  kDevicePrimaryCtxReset,
  kCtxDestroy,
};

enum Flags : uint8_t {
  kFlagPerThreadStream = 1,  // the _ptsz entry point was used: stream 0 means per-thread default
  kFlagStringRecord = 2,     // extra slots hold bytes, not return addresses
};

enum class MarkStage : uint8_t { kMark = 0, kStart = 1, kEnd = 2 };

struct EventPayload {
  // CLOCK_MONOTONIC ns, or TSC ticks where RingHeader::time_source says so (the collector
  // converts them to CLOCK_MONOTONIC); RingHeader has the pair to convert to the epoch.
  uint64_t time_ns;
  uint64_t addr;
  uint64_t size;
  uint64_t stream;
  uint64_t aux;
  uint32_t tid;
  int16_t device;  // -1 when unknown or host
  Kind kind;
  Api api;
  uint8_t flags;
  uint8_t extra_slots;
  uint8_t nframes;    // native return addresses in the extra slots
  uint8_t npyframes;  // then this many (code object address, line) pairs of Python frames
  int32_t result;     // CUresult of the real call
};
static_assert(sizeof(EventPayload) == kPayloadBytes);
static_assert(std::is_trivially_copyable_v<EventPayload>);

struct alignas(kSlotBytes) Slot {
  std::atomic<uint64_t> seq;  // ticket + 1 once published
  unsigned char payload[kPayloadBytes];
};
static_assert(sizeof(Slot) == kSlotBytes);
static_assert(std::atomic<uint64_t>::is_always_lock_free);

enum CollectorState : uint32_t {
  kCollectorPending = 0,
  kCollectorAttached = 1,
  kCollectorGone = 2
};

// What EventPayload::time_ns counts. kTimeTsc only where the kernel's clocksource is the TSC, so
// that one TSC is CLOCK_MONOTONIC's source on every CPU of the machine (the collector reads it
// too). kTimeMonotonicCoarse (CUMEMTRACE_CLOCK=coarse): CLOCK_MONOTONIC_COARSE, the same ns as
// CLOCK_MONOTONIC as of the kernel's last tick (1-4 ms), with start_monotonic_ns read from it too.
enum TimeSource : uint32_t { kTimeMonotonic = 0, kTimeTsc = 1, kTimeMonotonicCoarse = 2 };

struct RingHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t capacity;  // slots, power of two
  int32_t pid;
  int32_t ppid;
  uint64_t start_realtime_ns;
  uint64_t start_monotonic_ns;
  uint32_t stack_depth;
  uint32_t time_source;                    // TimeSource
  uint64_t start_tsc;                      // the TSC read with start_monotonic_ns (kTimeTsc only)
  alignas(64) std::atomic<uint64_t> head;  // next ticket to reserve
  alignas(64) std::atomic<uint64_t> tail;  // next ticket the collector reads
  alignas(64) std::atomic<uint64_t> dropped;  // events not recorded (collector gone or stalled)
  std::atomic<uint32_t> collector_state;
  std::atomic<int32_t> collector_pid;
  std::atomic<uint32_t> stalled;  // a producer timed out waiting; set until space frees up
  // Incremented by the preload's SIGUSR2 handler (async-signal-safe); the collector writes one
  // snapshot whenever it sees the value change.
  alignas(64) std::atomic<uint32_t> snapshot_requests;
};
static_assert(sizeof(RingHeader) <= kHeaderBytes);
static_assert(offsetof(RingHeader, head) == 64, "the fields written once share one cache line");

inline constexpr std::size_t ring_bytes(uint64_t capacity) {
  return kHeaderBytes + capacity * kSlotBytes;
}

}  // namespace cumemtrace::wire
