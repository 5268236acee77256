// Contract: the device, VMM and host memory of one traced process as its driver records say
// (kAlloc/kFree, kCreate/kRetain/kImport/kRelease, kMap/kUnmap, kReserve/kAddressFree,
// kHostAlloc/kHostFree, kMapImported/kUnmapImported, kFreeFailed) and the anomalies they show.
//   allocation -> segment_alloc + alloc          free -> free_requested + free_completed +
//   cuMemMap   -> segment_map                    segment_free; cuMemUnmap -> segment_unmap (one
//                                                per mapping)
// Device bytes (counted in the DeviceLedger) are device allocations plus cuMemCreate'd physical
// handles, counted from the create until the handle's last reference (create, retains) is
// released and its last mapping unmapped; mappings only make handles visible and add nothing.
// Mappings of imported handles (another process's memory, cuMemImportFromShareableHandle) are no
// segments of this process: they are listed apart (imported_mappings) and count no bytes; so are
// CUDA IPC mappings (cuIpcOpenMemHandle until cuIpcCloseMemHandle), listed with handle 0, and
// mapped buffers of external memory (cuExternalMemoryGetMappedBuffer until cuMemFree), listed
// with the external memory's handle. CUDA arrays, mipmapped arrays and imported external memory
// are device allocations at their handle's value (the sizes the preload found, wire_format.h).
// A free the driver refused (kFreeFailed) brings back what the latest free of that address took.
// Allocations from stream-ordered pools (cuMemAllocAsync, cuMemAllocFromPoolAsync) are marked
// async_pool on both entries. Graph memory (live/graph_memory.h) becomes a device allocation at
// launch (add_graph_allocation) and is freed like any other from then on.
// PyTorch's adoption: adopt_allocation()/adopt_mappings() mark memory PyTorch's caching
// allocator owns; its driver entries are adopted in the trace (live/trace_log.h), its later
// free/unmap writes none and its segments are PyTorch's to show; the bytes stay the driver's.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "live/device_ledger.h"
#include "live/ring_reader.h"
#include "live/trace_log.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

class DeviceAllocations {
 public:
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

  DeviceAllocations(TraceLog& trace, DeviceLedger& ledger) : trace_(trace), ledger_(ledger) {}

  void on_alloc(const Record& r, int64_t t, StackId stack);
  void on_free(const Record& r, int64_t t, StackId stack);
  void on_free_failed(const Record& r, int64_t t);
  void on_handle_reference(const Record& r, int64_t t, StackId stack);

  // PyTorch's segment at addr: adopts the live device allocation there, if any and not yet.
  void adopt_allocation(uint64_t addr);
  // PyTorch's mapped range [addr, addr + size): adopts the owned mappings in it; whether every
  // one adopted is a small-pool page (2 MiB) and any was adopted.
  struct Adopted {
    bool any = false;
    bool all_small = false;
  };
  Adopted adopt_mappings(uint64_t addr, uint64_t size, uint64_t small_page);

  // For graph launches (live/graph_memory.h).
  bool is_live(uint64_t addr) const { return live_.count(addr) != 0; }
  bool is_live_graph(uint64_t addr) const;
  bool was_freed(uint64_t addr) const { return freed_.count(addr) != 0; }
  // Frees the live allocation at addr (a free node or an auto-free); false: none was live.
  bool free_by_graph(uint64_t addr, uint64_t stream, int64_t t, uint32_t tid, bool per_thread);
  void add_graph_allocation(uint64_t addr, Live l, uint32_t tid);

  void anomaly(const char* kind, uint64_t addr, uint8_t api, uint32_t tid, int64_t t,
               StackId stack);

  // Segments not PyTorch's (device allocations by address, then owned mappings by address).
  void write_segments(snap::Snapshot& s) const;
  // vmm_handles, imported_mappings, host_allocations, anomalies.
  void write(snap::ToolSection& tool) const;

 private:
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

  void anomaly(const char* kind, const Record& r, int64_t t, StackId stack);
  // The free entries of a device allocation leaving (source graph when it is graph memory).
  void push_free(const Live& l, uint64_t addr, uint64_t stream, int64_t t, uint32_t tid,
                 bool per_thread);
  void push_alloc(const Live& l, uint64_t addr, int64_t t, uint32_t tid, bool async_pool);
  void drop_handle_if_unused(HandleMap::iterator it);
  void free_device(const Record& r, int64_t t, StackId stack);
  void unmap(const Record& r, int64_t t, StackId stack);
  void map(const Record& r, Live l, int64_t t, StackId stack);

  TraceLog& trace_;
  DeviceLedger& ledger_;
  std::unordered_map<uint64_t, Live> live_;  // device allocations by address
  std::map<uint64_t, Mapping> mapped_;       // VMM mappings by virtual address
  HandleMap handles_;
  HandleMap released_handles_;  // the last state of handles dropped, to undo a failed release
  std::unordered_map<uint64_t, Live> host_;      // pinned host memory
  std::unordered_map<uint64_t, Live> reserved_;  // VA reservations (no memory)
  std::unordered_map<uint64_t, Live> freed_;     // last free per address: double free, undo
  std::vector<snap::Anomaly> anomalies_;
};

}  // namespace cumemtrace::collect
