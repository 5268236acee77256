// Contract: the collector's model of one traced process, fed ring records in ticket order. It
// keeps the complete live state (device allocations, VMM handles and mappings, pinned host
// memory), per-device live/peak bytes, the trace (optionally bounded to the newest N entries,
// never at the expense of the live state), anomalies and the module map, and builds a
// snap::Snapshot of the current state at any time (intermediate, OOM or final snapshots).
//
// Event mapping (PyTorch memory-history actions, see schemas/snapshot.schema.json):
//   allocation -> segment_alloc + alloc          free -> free_requested + free_completed +
//   segment_free cuMemMap   -> segment_map                    cuMemUnmap -> segment_unmap (one per
//   mapping) OOM        -> oom (size, device_free)
// Device bytes are device allocations plus cuMemCreate'd physical handles, counted from the
// create until the handle's last reference (create, retains) is released and its last mapping
// unmapped; mappings only make handles visible and add nothing. Mappings of imported handles
// (another process's memory, cuMemImportFromShareableHandle) are no segments of this process:
// they are listed apart (imported_mappings) and count no bytes; so are CUDA IPC mappings
// (cuIpcOpenMemHandle until cuIpcCloseMemHandle), listed with handle 0, and mapped buffers of
// external memory (cuExternalMemoryGetMappedBuffer until cuMemFree), listed with the external
// memory's handle. CUDA arrays, mipmapped arrays and imported external memory are device
// allocations at their handle's value (the sizes the preload found, wire_format.h).
// PyTorch's caching allocator (kTorchBlock records, PyTorch's TraceEntry actions) is merged in:
// its entries go into the trace in ring order with source = pytorch. A free_completed recorded
// without a stack takes its block's free_requested stack (the allocation's when the request was
// not seen), as PyTorch gives it its request's context; the preload walks none for it. Driver
// memory PyTorch owns (a pytorch segment_alloc at the address of a live device allocation; driver
// mappings inside a pytorch segment_map range) is adopted: its driver-level entries are taken out
// of the trace (the driver records before PyTorch does, so they are among the newest entries) and
// its later driver free/unmap writes none, so every byte of reserved memory is counted once; the
// live and peak device bytes stay the driver's. At snapshot time PyTorch's segments (cudaMalloc'd
// ones, and maximal mapped runs of expandable segments) are tiled with the live blocks: allocated
// and pending-free blocks at their addresses with PyTorch's rounding (512 B; in the large pool of
// the default allocator a remainder of at most 1 MiB stays in the block, under expandable_segments
// none does), the gaps between them inactive.
// CUDA graph memory (kGraph* records): the allocation and free nodes of each graph are kept, in
// the order they were added; an instantiation copies its graph's nodes. A launch applies them in
// that order: an allocation node makes its address live (segment_alloc + alloc, source graph,
// with the stack of the node's creation: cuGraphAddMemAllocNode, or the cuMemAllocAsync that was
// captured), a free node frees it (free_requested + free_completed + segment_free, source graph;
// a free node of an address not live is a free_unknown_pointer anomaly); an executable graph
// instantiated with AUTO_FREE_ON_LAUNCH first frees what its previous launch left live. Graph
// allocations are device allocations from then on: cuMemFree/cuMemFreeAsync free them, and one
// that is still live at the end is a leak, as compute-sanitizer reports it. Between node creation
// and launch an address holds no memory and is not shown. The driver's graph memory pool
// (kGraphMemReserved readings) is kept per device: latest and highest.
// Allocations from stream-ordered pools (cuMemAllocAsync, cuMemAllocFromPoolAsync) are marked
// async_pool on their alloc entry; the preload's samples of those pools (kPoolUsage) become the
// tool section's pool_memory: the samples where a pool's reserved bytes changed, plus each pool's
// latest one.
// CUDA contexts (kContextCreated / kContextDestroyed) are kept in order of creation; the owner
// measures each new one right after adding its record (measure_new_context), and only measured
// ones are written (tool section's contexts). A cuCtxDestroy ends the context of its handle, a
// primary context's last release or reset the in-being primary context of its device; a primary
// context's creation while one is in being on the device (two threads raced) is the same one.
// The automatic phases' ownership walks (kTorchOwners: the data pointers and sizes of the
// parameters, gradients or optimizer state at one moment) become the tool section's ownership, one
// OwnerWalk per walk in ring order: a record marked kOwnersFirst starts a walk of its role at its
// time, the role's records after it append their pairs to it. All walks are kept (the analysis
// joins each with the blocks live at its time); a role outside 1..3 is a corrupt record.
// Marks become external_annotations in ring order: MARK, START (a push or a start/end range),
// END (a pop takes the name of the thread's innermost open push, an end the name of its range's
// start; an END that matches nothing is dropped). Their device is that of the marking thread's
// latest device event, 0 before it has one.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "live/ring_reader.h"
#include "live/symbolizer.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

struct ProcessInfo {
  int pid = 0;
  int ppid = 0;
  std::string exe;
  std::vector<std::string> argv;
  std::map<std::string, std::string> rank;
  std::string hostname;
};

class TraceModel {
 public:
  TraceModel(uint64_t start_realtime_ns, uint64_t start_monotonic_ns, uint64_t max_trace_events);

  void add(const Record& r);

  // Events that ask for a snapshot at once (OOM) since the last call.
  bool take_oom_request();
  // The tag of a cumemtrace_snapshot(tag) record just added, if any (cleared by the call).
  std::optional<std::string> take_snapshot_request();
  // PCI bus ids of the CUDA ordinals the process announced (kDevice), by ordinal.
  const std::map<int, std::string>& device_pci_bus_ids() const { return device_pci_; }
  // The device of the context whose creation was the record just added, if it was one (cleared
  // by the call).
  std::optional<int> take_new_context();
  // That context's cost, from the process's memory on its device as the driver reports it now.
  void measure_new_context(uint64_t driver_used_bytes);
  bool exited() const { return exited_; }
  int exit_status() const { return exit_status_; }
  uint64_t events_total() const { return events_total_; }
  int64_t last_time_us() const { return last_time_us_; }

  snap::Snapshot build(const ProcessInfo& info, Symbolizer& sym) const;

 private:
  using StackId = int32_t;
  struct Live {
    uint64_t size = 0;
    int device = 0;
    uint64_t stream = 0;
    StackId stack = -1;
    int64_t time_us = 0;
    uint8_t api = 0;
    bool per_thread = false;
    bool undoable = false;     // in freed_: the latest free of this address removed it
    bool torch_owned = false;  // adopted by a PyTorch segment: its driver entries are not written
    bool graph = false;        // made by a CUDA graph's allocation node at launch
  };
  struct Entry {  // one trace entry before symbolization
    snap::Action action;
    int device;
    uint64_t addr;
    uint64_t size;
    uint64_t stream;
    int64_t time_us;
    StackId stack;
    uint64_t device_free;
    uint32_t tid;
    bool per_thread;
    bool pytorch = false;
    bool graph = false;
    bool async_pool = false;  // an alloc from a stream-ordered pool
  };
  struct DeviceState {
    uint64_t live = 0;
    uint64_t peak = 0;
    int64_t peak_time_us = 0;
    uint64_t allocations = 0;
    uint64_t frees = 0;
    uint64_t graph_reserved = 0;
    uint64_t graph_reserved_peak = 0;
  };

  int64_t to_us(uint64_t monotonic_ns) const;
  StackId intern(const Record& r);
  snap::Stack render(size_t stack, Symbolizer& sym) const;
  void push(snap::Action a, int device, uint64_t addr, uint64_t size, uint64_t stream, int64_t t,
            StackId stack, uint32_t tid, uint64_t device_free = 0, bool per_thread = false);
  DeviceState& dev(int device);
  void grow(int device, uint64_t size, int64_t t);
  void shrink(int device, uint64_t size);
  void anomaly(const char* kind, const Record& r, int64_t t, StackId stack);
  void anomaly(const char* kind, uint64_t addr, uint8_t api, uint32_t tid, int64_t t,
               StackId stack);
  // The free entries of a device allocation leaving (source graph when it is graph memory).
  void push_free(const Live& l, uint64_t addr, uint64_t stream, int64_t t, uint32_t tid,
                 bool per_thread);

  void on_alloc(const Record& r, int64_t t, StackId stack);
  void on_free(const Record& r, int64_t t, StackId stack);
  void on_free_failed(const Record& r, int64_t t);
  void on_handle_reference(const Record& r, int64_t t, StackId stack);
  void on_graph(const Record& r, int64_t t, StackId stack);
  void launch_graph(const Record& r, int64_t t);

  // CUDA graph memory nodes (see the contract above), by graph and by executable graph.
  struct GraphNode {
    bool alloc = true;  // else a free node
    uint64_t addr = 0;
    uint64_t size = 0;
    int device = 0;
    StackId stack = -1;
    uint8_t api = 0;
  };
  struct GraphExec {
    std::vector<GraphNode> nodes;
    bool auto_free = false;
  };
  std::unordered_map<uint64_t, std::vector<GraphNode>> graphs_;
  std::unordered_map<uint64_t, GraphExec> graph_execs_;

  uint64_t start_realtime_ns_;
  uint64_t start_monotonic_ns_;
  uint64_t max_trace_events_;

  std::deque<Entry> trace_;
  uint64_t trace_dropped_ = 0;
  std::unordered_map<uint64_t, Live> live_;  // device allocations by address
  struct Handle {  // a VMM allocation handle: its memory lives while referenced or mapped
    Live l;
    uint32_t refs = 1;  // create/import/retain minus releases
    uint32_t maps = 0;
    bool owned = true;  // cuMemCreate'd here; imported or unknown handles count no bytes
  };
  struct Mapping {
    Live l;
    uint64_t handle = 0;
    bool owned = true;  // of an owned handle: a segment; otherwise listed as imported
  };
  using HandleMap = std::unordered_map<uint64_t, Handle>;
  std::map<uint64_t, Mapping> mapped_;  // VMM mappings by virtual address
  HandleMap handles_;
  HandleMap released_handles_;  // the last state of handles dropped, to undo a failed release
  void drop_handle_if_unused(HandleMap::iterator it);
  std::unordered_map<uint64_t, Live> host_;      // pinned host memory
  std::unordered_map<uint64_t, Live> reserved_;  // VA reservations (no memory)
  std::unordered_map<uint64_t, Live> freed_;     // last free per address: double free, undo
  std::vector<DeviceState> devices_;
  std::vector<snap::Anomaly> anomalies_;

  struct RawStack {
    std::vector<uint64_t> native;
    std::vector<uint64_t> python;  // (index into py_code_ or kNoPyCode, line) pairs
  };
  static constexpr uint64_t kNoPyCode = ~uint64_t{0};
  std::vector<RawStack> stacks_;
  std::unordered_map<std::string, StackId> stack_index_;  // frames as interned -> id
  // Python code objects as announced (file, function), in announcement order, and the latest
  // announcement of each code object address: an address may be announced again for another
  // code object (the preload holds no reference), which then applies to later records only.
  // Stacks are interned with announcement indexes, so their names are fixed at record time.
  std::vector<std::pair<std::string, std::string>> py_code_;
  std::unordered_map<uint64_t, uint64_t> py_code_latest_;
  std::vector<std::pair<uint64_t, std::string>> modules_;
  std::map<std::string, std::string> threads_;

  uint64_t events_total_ = 0;
  int64_t last_time_us_ = 0;
  bool oom_pending_ = false;
  std::optional<std::string> snapshot_pending_;

  // PyTorch's caching allocator (see the contract above).
  struct TorchBlock {  // a live block: allocated, or free requested and not yet completed
    uint64_t requested = 0;
    uint64_t stream = 0;
    StackId stack = -1;       // the allocation's
    StackId free_stack = -1;  // the free request's, which its completion shares
    bool pending_free = false;
  };
  struct TorchSegment {  // a cudaMalloc'd segment, or one mapped piece of an expandable segment
    uint64_t size = 0;
    int device = 0;
    uint64_t stream = 0;
    StackId stack = -1;
    bool small = false;  // small pool (2 MiB segments or pages)
  };
  void on_torch(const Record& r, int64_t t, StackId stack);
  void on_torch_info(const std::string& text);
  void unpush_driver(snap::Action a, uint64_t addr);
  void torch_segments(snap::Snapshot& s) const;
  std::map<uint64_t, TorchBlock> torch_blocks_;
  std::map<uint64_t, TorchSegment> torch_segments_;  // cudaMalloc'd, by address
  std::map<uint64_t, TorchSegment> torch_mapped_;    // expandable pieces, by address
  std::optional<snap::PytorchInfo> pytorch_;

  // What the model and optimizer own (kTorchOwners): every walk, in ring order; by role, the
  // index of its latest walk, which a continuation record extends.
  void on_owners(const Record& r, int64_t t);
  static constexpr size_t kNoWalk = ~size_t{0};
  std::vector<snap::OwnerWalk> ownership_;
  size_t open_walk_[4] = {kNoWalk, kNoWalk, kNoWalk, kNoWalk};

  // Stream-ordered memory pools as the preload sampled them (kPoolUsage).
  void on_pool_usage(const Record& r, int64_t t);
  std::vector<snap::PoolMemorySample> pool_samples_;  // kept: reserved bytes changed
  std::unordered_map<uint64_t, snap::PoolMemorySample> pool_latest_;  // by pool handle
  std::unordered_map<uint64_t, int64_t> pool_kept_;  // pool -> time of its last kept sample

  void on_context(const Record& r, int64_t t);
  struct Context {
    snap::ContextMemory c;
    bool primary = false;  // a device's primary context (else cuCtxCreate'd)
    bool measured = false;
  };
  std::vector<Context> contexts_;
  std::optional<int> new_context_;

  void on_mark(const Record& r, int64_t t);
  std::vector<snap::Annotation> annotations_;
  std::unordered_map<uint32_t, std::vector<std::string>> pushed_;  // tid -> open push names
  std::unordered_map<uint64_t, std::string> ranges_;               // start/end id -> name
  std::unordered_map<uint32_t, int> thread_device_;                // tid -> latest device
  std::map<int, std::string> device_pci_;
  uint32_t last_tid_ = 0;
  int last_device_ = -1;
  bool exited_ = false;
  int exit_status_ = 0;
};

}  // namespace cumemtrace::collect
