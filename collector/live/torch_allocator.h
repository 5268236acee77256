// Contract: PyTorch's caching allocator in one traced process (kTorchBlock records, PyTorch's
// TraceEntry actions, and kTorchInfo: version, backend, capture mode). Its entries go into the
// trace in ring order with source = pytorch. A free_completed recorded without a stack takes its
// block's free_requested stack (the allocation's when the request was not seen), as PyTorch gives
// it its request's context; the preload walks none for it. Driver memory PyTorch owns (a pytorch
// segment_alloc at the address of a live device allocation; driver mappings inside a pytorch
// segment_map range) is adopted (live/device_allocations.h: its driver entries are never written,
// its later driver free/unmap writes none), so every byte of reserved memory is counted once; the
// live and peak device bytes stay the driver's (live/device_ledger.h).
// At snapshot time PyTorch's segments (cudaMalloc'd ones, and maximal mapped runs of expandable
// segments) are tiled with the live blocks: allocated and pending-free blocks at their addresses
// with PyTorch's rounding (512 B; in the large pool of the default allocator a remainder of at
// most 1 MiB stays in the block, under expandable_segments none does), the gaps between them
// inactive.
// A failed driver allocation that PyTorch's allocator made itself (on_own_driver_oom: the
// collector tells it by the stack, live/trace_model.h) is PyTorch's to settle: it frees its cache
// and retries, then either gets its segment (no OOM: the program goes on) or records its own OOM,
// the one its user is told of. Either settles the device's pending driver OOMs, whose entries are
// then adopted (never written), so that the trace holds PyTorch's OOM once, as PyTorch's own
// history does, and a retry that succeeded is no OOM at all.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "live/device_allocations.h"
#include "live/ring_reader.h"
#include "live/trace_log.h"
#include "pytorch/torch_allocator_rules.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

class TorchAllocator {
 public:
  TorchAllocator(TraceLog& trace, DeviceAllocations& memory) : trace_(trace), memory_(memory) {}

  // One kTorchBlock record; true when it was PyTorch's OOM (a snapshot is due).
  bool on_block(const Record& r, int64_t t, int32_t stack);
  // A kTorchInfo record at `t`: the capture's report when it attached ("version=..."), or a
  // change of the allocator's settings ("event=alloc_conf", "event=memory_fraction"), or the use
  // of a private pool ("event=private_pool", kind=cuda_graph|mempool).
  void on_info(const std::string& text, int64_t t);
  // A driver OOM (already in the trace) of PyTorch's own allocation attempt on device.
  void on_own_driver_oom(int device) { ++driver_ooms_[device]; }

  // Bytes allocated now (live blocks not pending free, all devices), in PyTorch's block bytes:
  // the blocks as write_segments tiles them.
  uint64_t allocated() const;
  // Bytes of PyTorch's segments now on each device, added into reserved[device] where it exists.
  void add_reserved(std::vector<uint64_t>& reserved) const;
  bool block_capture() const { return info_ && info_->capture == "blocks"; }

  // PyTorch's segments with their blocks, as torch.cuda.memory_snapshot() lays them out.
  void write_segments(snap::Snapshot& s) const;
  const std::optional<snap::PytorchInfo>& info() const { return info_; }

 private:
  struct Block {  // a live block: allocated, or free requested and not yet completed
    uint64_t requested = 0;
    uint64_t stream = 0;
    int32_t stack = -1;       // the allocation's
    int32_t free_stack = -1;  // the free request's, which its completion shares
    bool pending_free = false;
  };
  struct Segment {  // a cudaMalloc'd segment, or one mapped piece of an expandable segment
    uint64_t size = 0;
    int device = 0;
    uint64_t stream = 0;
    int32_t stack = -1;
    bool small = false;  // small pool (2 MiB segments or pages)
  };
  void unmap(uint64_t addr, uint64_t size);
  void settle_driver_ooms(int device);
  void write_segment(snap::Snapshot& s, uint64_t addr, const Segment& g, uint64_t total,
                     bool expandable) const;
  // Each segment (cudaMalloc'd, or a maximal run of mapped pieces): segment(addr, g, total,
  // expandable).
  template <typename F>
  void for_each_segment(F&& segment) const;
  // The live blocks of one segment with their block bytes: block(addr, size, Block).
  template <typename F>
  void tile(uint64_t addr, const Segment& g, uint64_t total, bool expandable, F&& block) const;

  TraceLog& trace_;
  DeviceAllocations& memory_;
  std::map<uint64_t, Block> blocks_;
  std::map<uint64_t, Segment> segments_;  // cudaMalloc'd, by address
  std::map<uint64_t, Segment> mapped_;    // expandable pieces, by address
  std::optional<snap::PytorchInfo> info_;
  // The settings changes seen (kept apart: one may come before the capture's report).
  std::vector<snap::AllocatorConfChange> alloc_confs_;
  std::vector<snap::MemoryFractionChange> memory_fractions_;
  std::vector<snap::PrivatePoolUse> private_pools_;
  // The configuration in force (the rules the written blocks follow); defaults until known.
  analysis::torch_alloc::AllocatorConfig config_;
  std::map<int, int> driver_ooms_;  // device -> PyTorch's own driver OOMs not yet settled
};

}  // namespace cumemtrace::collect
