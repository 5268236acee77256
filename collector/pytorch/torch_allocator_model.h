// Contract: a model of PyTorch's native CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp,
// DeviceCachingAllocator) as of torch 2.11, the version cumemtrace's block capture supports. It is
// fed the requests PyTorch's allocator saw (malloc of a requested size on a stream, the block's
// return to the pool at free_completed, empty_cache) and answers with the segment events PyTorch
// would have made (segment_alloc/segment_free for cudaMalloc'd segments, segment_map/segment_unmap
// for expandable segments) and its reserved and allocated bytes. What it models, as PyTorch does:
//  - rounding, pools, segment sizes and splitting by the rules of torch_allocator_rules.h (the one
//    copy); one best fit per pool ordered by (stream, size, address): a block is reused only on
//    its stream; merging with free neighbours on free;
//  - max_split_size: a request under it never takes a block at or over it; a request over it takes
//    a block at most max_non_split_rounding_size larger (20 MiB by default);
//  - when no free block fits: garbage_collection_threshold (only under a fractional budget, as
//    set_per_process_memory_fraction), a new segment, then freeing oversize cached blocks, then
//    freeing every unsplit cached block (empty_cache) and one more try; else out of memory;
//  - expandable segments: one address range per stream and pool, pages of 2 MiB (small) or
//    large_segment_size (large) mapped on demand at the lowest address with room, unmapped pages
//    freed by empty_cache.
// Not modelled: CUDA graph private pools and MemPools, record_stream's deferred frees other than as
// the trace's free_completed says, cudaMallocAsync, allocator settings changed while running.
// Addresses are the model's own (ties in best fit go to the lower address); a caller replaying a
// recording can hand the recorded addresses in (Hooks::segment_address) so ties go as they went.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "pytorch/torch_allocator_rules.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::analysis::torch_alloc {

// A limit on what PyTorch may reserve. kDevice: a cudaMalloc or a page mapping fails when it would
// take reserved past `bytes` (the device is full). kFraction: PyTorch's own check under
// set_per_process_memory_fraction (reserved + the segment size a request would cudaMalloc, even
// with expandable segments), which also enables garbage_collection_threshold.
struct Budget {
  uint64_t bytes = 0;
  bool fraction = false;
};

struct SegmentEvent {
  snap::Action action = snap::Action::kSegmentAlloc;  // segment_alloc/free/map/unmap
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t stream = 0;
};

class CachingAllocatorModel {
 public:
  struct Hooks {
    // The address a new cudaMalloc'd segment (expandable: a new address range) of `size` bytes
    // on `stream` gets; 0 = the model picks one.
    std::function<uint64_t(uint64_t size, uint64_t stream, bool expandable)> segment_address;
  };

  CachingAllocatorModel(AllocatorConfig config, std::optional<Budget> budget, Hooks hooks = {});
  ~CachingAllocatorModel();
  CachingAllocatorModel(const CachingAllocatorModel&) = delete;
  CachingAllocatorModel& operator=(const CachingAllocatorModel&) = delete;

  // A request for `size` bytes on `stream`; the block's id, or -1 when PyTorch would raise
  // OutOfMemoryError (after freeing its cache and retrying).
  int32_t malloc(uint64_t size, uint64_t stream);
  // The block returns to its pool (PyTorch's free_completed).
  void free(int32_t block);
  // torch.cuda.empty_cache(): every unsplit cached segment freed, free expandable pages unmapped.
  void empty_cache();
  // A cudaMalloc'd segment PyTorch held before the replayed requests began, with the blocks live
  // in it then ((address, size), in address order, inside the segment); the rest of it is free.
  // Returns the live blocks' ids in the same order.
  std::vector<int32_t> seed_segment(uint64_t addr, uint64_t size, uint64_t stream, bool small,
                                    const std::vector<std::pair<uint64_t, uint64_t>>& live);

  uint64_t reserved() const { return reserved_; }
  uint64_t allocated() const { return allocated_; }  // block sizes (memory_allocated())
  // PyTorch's inactive_split_bytes (memory_stats()): free bytes in blocks split off a segment
  // that holds other blocks, what fragmentation costs. A wholly free segment is cache that
  // empty_cache() returns, not fragmentation; free pages of an expandable segment count as
  // PyTorch counts them (split off its range). Walks the free blocks: for moments, not steps.
  uint64_t inactive_split() const;
  uint64_t block_size(int32_t block) const;
  uint64_t block_address(int32_t block) const;
  // Segment events since the last call, oldest first.
  std::vector<SegmentEvent> take_events();

 private:
  struct Block;
  struct Pool;
  struct Expandable;
  struct SizeOrder {
    const std::vector<Block>* blocks;
    bool operator()(int32_t a, int32_t b) const;
  };
  struct AddressOrder {
    const std::vector<Block>* blocks;
    bool operator()(int32_t a, int32_t b) const;
  };

  int32_t new_block(uint64_t ptr, uint64_t size, uint64_t stream, Pool* pool);
  void delete_block(int32_t b);
  void insert_free(int32_t b);
  bool get_free_block(Pool& pool, uint64_t size, uint64_t stream, int32_t* out);
  bool alloc_block(Pool& pool, uint64_t size, uint64_t alloc_size, uint64_t stream, int32_t* out);
  bool release_available_cached_blocks(Pool& pool, uint64_t size, uint64_t stream);
  void release_cached_blocks();
  void release_blocks(Pool& pool);
  void release_block(int32_t b);
  void garbage_collect_cached_blocks();
  bool should_split(int32_t b, uint64_t size) const;
  int32_t alloc_found_block(int32_t b, uint64_t size, bool split);
  uint64_t try_merge_blocks(int32_t dst, int32_t src);
  int32_t find_expandable_block(Pool& pool, uint64_t stream, uint64_t size);
  bool map_block(int32_t b, uint64_t size);
  int32_t try_allocate_expandable_block(Pool& pool, uint64_t stream, uint64_t size);
  void unmap_block(int32_t b);
  bool allocatable(int32_t b) const;
  uint64_t fresh_address(uint64_t size);

  AllocatorConfig c_;
  std::optional<Budget> budget_;
  Hooks hooks_;
  std::vector<Block> blocks_;
  std::vector<int32_t> unused_;  // ids of deleted blocks, for reuse
  std::vector<Expandable> expandable_;
  Pool* small_;
  Pool* large_;
  uint64_t reserved_ = 0;
  uint64_t allocated_ = 0;
  uint64_t next_address_;
  std::vector<SegmentEvent> events_;
};

}  // namespace cumemtrace::analysis::torch_alloc
