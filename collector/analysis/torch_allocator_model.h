// Contract: a model of PyTorch's native CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp,
// DeviceCachingAllocator) as of torch 2.11, the version cumemtrace's block capture supports. It is
// fed the requests PyTorch's allocator saw (malloc of a requested size on a stream, the block's
// return to the pool at free_completed, empty_cache) and answers with the segment events PyTorch
// would have made (segment_alloc/segment_free for cudaMalloc'd segments, segment_map/segment_unmap
// for expandable segments) and its reserved and allocated bytes. What it models, as PyTorch does:
//  - rounding: requests below 512 B become 512 B, others a multiple of 512 B, or the next
//    power-of-2 division where roundup_power2_divisions asks for one (intervals of 1 MiB .. 64
//    GiB);
//  - pools: the small pool (rounded size <= 1 MiB, 2 MiB segments) and the large pool (segments of
//    large_segment_size, 20 MiB, for requests under 10 MiB, else the request rounded to 2 MiB), one
//    best fit per pool ordered by (stream, size, address): a block is reused only on its stream;
//  - splitting (small pool, or expandable segments: any remainder >= 512 B; large pool: a remainder
//    over 1 MiB of a request under max_split_size) and merging with free neighbours on free;
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

#include "snapshot/snapshot.h"

namespace cumemtrace::analysis::torch_alloc {

// The torch version (major.minor) whose allocator this models.
inline constexpr std::string_view kModelledTorch = "2.11";

inline constexpr uint64_t kMiB = 1048576;
inline constexpr uint64_t kMinBlockSize = 512;
inline constexpr uint64_t kSmallSize = kMiB;           // largest small-pool request
inline constexpr uint64_t kSmallBuffer = 2 * kMiB;     // small-pool segment (and expandable page)
inline constexpr uint64_t kMinLargeAlloc = 10 * kMiB;  // under this, a large_segment_size segment
inline constexpr uint64_t kRoundLarge = 2 * kMiB;      // larger segments are rounded to this
inline constexpr uint64_t kLargeBuffer = 20 * kMiB;    // default large_segment_size
inline constexpr size_t kRoundupIntervals = 16;        // roundup_power2_divisions: 1 MiB .. 64 GiB

// The allocator's settings (PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF), defaults as PyTorch's.
struct AllocatorConfig {
  uint64_t max_split_size = UINT64_MAX;  // unlimited
  uint64_t max_non_split_rounding_size = kLargeBuffer;
  uint64_t large_segment_size = kLargeBuffer;
  double garbage_collection_threshold = 0;
  bool expandable_segments = false;
  std::array<uint64_t, kRoundupIntervals> roundup_power2_divisions{};  // 0 or 1: no rounding
  std::string text;  // the configuration as written ("" = PyTorch's defaults)
};

// Parses a configuration in PyTorch's own syntax ("expandable_segments:True,max_split_size_mb:128",
// "roundup_power2_divisions:[256:1,512:2,>:4]") onto PyTorch's defaults, with PyTorch's checks;
// nullopt with `error` set for anything PyTorch would refuse or this model does not cover
// (backend:cudaMallocAsync). Settings for pinned host memory and release_lock_on_cudamalloc are
// accepted and change nothing here.
std::optional<AllocatorConfig> parse_alloc_conf(std::string_view text, std::string* error);

// The size PyTorch gives a request (round_size) and the segment it would cudaMalloc for it
// (get_allocation_size of the rounded size).
uint64_t round_size(const AllocatorConfig& c, uint64_t size);
uint64_t allocation_size(const AllocatorConfig& c, uint64_t rounded);

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
