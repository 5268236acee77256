// Contract: the collector's model of one traced process, fed ring records in ticket order: it
// dispatches each record to the tracker of its domain and assembles a snap::Snapshot of the
// current state at any time (intermediate, OOM or final snapshots). The trackers, each with its
// own contract:
//   live/device_ledger.h       live and peak bytes per device (who writes which peak)
//   live/trace_log.h           the trace in ring order, optionally bounded; PyTorch's adoption
//   live/device_allocations.h  device, VMM and host memory, failed frees, anomalies
//   live/graph_memory.h        CUDA graph memory nodes and launches
//   live/torch_allocator.h     PyTorch's caching allocator: blocks and segments
//   live/context_memory.h      CUDA contexts and their measured cost
//   live/pool_samples.h        stream-ordered pools' samples
//   live/ownership_walks.h     the automatic phases' ownership walks
//   live/annotations.h         the user's marks
//   live/stack_table.h         stacks, Python code objects and modules
// This class keeps the rest: process lifetime (kExit), thread names, devices' PCI bus ids, the
// ranks torch.distributed reported, the requests the owner takes (OOM, cumemtrace_snapshot(tag),
// a new context, the step mark) and the event count and latest time.
// Event mapping (PyTorch memory-history actions, see schemas/snapshot.schema.json) is in the
// trackers' contracts; the driver's OOM (kOom) is an oom entry (size, device_free) written here,
// and it, like PyTorch's, asks for a snapshot at once, unless it was PyTorch's own allocation
// attempt (its stack passes through libc10_cuda while PyTorch's blocks are captured), which
// PyTorch settles (live/torch_allocator.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "live/annotations.h"
#include "live/context_memory.h"
#include "live/device_allocations.h"
#include "live/device_ledger.h"
#include "live/graph_memory.h"
#include "live/ownership_walks.h"
#include "live/pool_samples.h"
#include "live/ring_reader.h"
#include "live/stack_table.h"
#include "live/symbolizer.h"
#include "live/torch_allocator.h"
#include "live/trace_log.h"
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
  std::optional<int> take_new_context() { return contexts_.take_new(); }
  // That context's cost, from the process's memory on its device as the driver reports it now.
  void measure_new_context(uint64_t driver_used_bytes);
  bool exited() const { return exited_; }
  int exit_status() const { return exit_status_; }
  uint64_t events_total() const { return events_total_; }
  int64_t last_time_us() const { return last_time_us_; }

  snap::Snapshot build(const ProcessInfo& info, Symbolizer& sym) const {
    return build_with(info, &sym);
  }
  // The same with native frames unresolved ("0x..." in "??"), for views that need no names (the
  // live gauges: live/metrics_text.h), which must not stall the loop on DWARF.
  snap::Snapshot build(const ProcessInfo& info) const { return build_with(info, nullptr); }

  // For bounded capture's interval summaries (live/interval_log.h): per device, cumulative counts
  // and bytes, the bytes live now, the highest since reset_window_peaks() and overall.
  struct DeviceTotals {
    uint64_t allocations = 0, frees = 0, bytes_allocated = 0, bytes_freed = 0;
    uint64_t live = 0, window_peak = 0, peak = 0;
    uint64_t torch_reserved = 0;  // PyTorch's segments on the device now (sum over segments)
  };
  std::vector<DeviceTotals> device_totals() const;
  void reset_window_peaks() { ledger_.reset_window_peaks(); }
  // The highest peak among the devices whose live bytes are at their peak right now; 0: none is.
  uint64_t at_peak_bytes() const { return ledger_.at_peak_bytes(); }
  // Bytes PyTorch's caching allocator has allocated now (its live blocks, all devices).
  uint64_t torch_allocated() const { return torch_.allocated(); }
  // Device bytes allocated per stack since the last call (what grew device memory), counted only
  // once count_stack_bytes() was called: bounded capture's interval summaries are its only reader.
  void count_stack_bytes() { ledger_.count_stack_bytes(); }
  std::unordered_map<int32_t, uint64_t> take_stack_bytes() { return ledger_.take_stack_bytes(); }
  // Whether the record just added was the automatic phases' iteration mark (auto:step).
  bool take_step_mark() { return annotations_.take_step_mark(); }
  snap::Stack stack(int32_t id, Symbolizer& sym) const {
    return stacks_.render(static_cast<size_t>(id), &sym);
  }

 private:
  int64_t to_us(uint64_t monotonic_ns) const;
  snap::Snapshot build_with(const ProcessInfo& info, Symbolizer* sym) const;
  void on_device_event(const Record& r, int64_t t);
  void on_rank_info(const std::string& text);

  uint64_t start_realtime_ns_;
  uint64_t start_monotonic_ns_;

  // Declared in construction order: each tracker is given the ones above it.
  DeviceLedger ledger_;
  TraceLog trace_;
  DeviceAllocations memory_;
  GraphMemory graphs_;
  TorchAllocator torch_;
  ContextMemory contexts_;
  PoolSamples pools_;
  OwnershipWalks ownership_;
  Annotations annotations_;
  StackTable stacks_;

  std::map<std::string, std::string> threads_;
  std::map<int, std::string> device_pci_;
  // kRankInfo's keys (torch.distributed.*), added to the tool section's `rank` map.
  std::map<std::string, std::string> rank_reported_;
  uint64_t events_total_ = 0;
  int64_t last_time_us_ = 0;
  bool oom_pending_ = false;
  std::optional<std::string> snapshot_pending_;
  bool exited_ = false;
  int exit_status_ = 0;
};

}  // namespace cumemtrace::collect
