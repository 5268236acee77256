// Contract: PyTorch's caching-allocator rules, the one copy every part of the collector reads: the
// live tiler (live/torch_allocator.h: the blocks of the segments it writes), the replay
// (torch_allocator_model.h: whatif, the block size of every tensor) and the OOM verdict (the
// segment a failed request would have asked for). Sources: c10/cuda/CUDACachingAllocator.cpp
// (round_size, get_allocation_size, should_split) and the configuration parser
// (c10/cuda/CUDAAllocatorConfig.cpp; c10/core/AllocatorConfig.cpp from 2.9 on).
//  - rounding: a request below 512 B is 512 B, others a multiple of 512 B, or, where
//    roundup_power2_divisions asks for it in the request's power-of-2 interval (1 MiB .. 64 GiB,
//    16 intervals), the next of that many divisions of the interval;
//  - pools: a rounded size up to 1 MiB is the small pool's (2 MiB segments; pages of 2 MiB under
//    expandable segments), larger the large pool's: a segment of large_segment_size (20 MiB by
//    default) for a request under 10 MiB, else the request rounded up to 2 MiB;
//  - splitting: the small pool, and every pool under expandable segments, splits off any
//    remainder of at least 512 B; the large pool splits a block only for a request under
//    max_split_size leaving more than 1 MiB, else the remainder stays in the block (the block
//    PyTorch counts in memory_allocated() is then larger than the rounded request);
//  - max_split_size_mb, max_non_split_rounding_mb, garbage_collection_threshold,
//    expandable_segments: parsed with PyTorch's checks (see torch_allocator_model.h for how the
//    replay applies them).
// Torch versions (what differs between 2.4 and 2.15 for these rules): the constants, pools and
// split rule above are the same in every release from 2.4 through 2.15 that the layout table of
// preload/hooks/torch_layouts.h lists; what differs is which options the parser takes:
// max_non_split_rounding_mb exists from 2.4; from 2.9 the parser is the accelerator-wide
// c10/core/AllocatorConfig.cpp and PYTORCH_ALLOC_CONF is read before PYTORCH_CUDA_ALLOC_CONF;
// large_segment_size_mb (20 MiB by default) is read as the 2.11 model always read it, and the
// newest sources check max_split_size_mb against it rather than against 20 MiB. These version
// notes come from reading PyTorch's sources and release notes; only 2.11 has been checked against
// recorded segments (tests/fixtures/torch-2.11 and the GPU validators), so `unmodelled_torch`
// accepts 2.11 and refuses the others with that reason: a replay of another version says why
// instead of guessing.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cumemtrace::analysis::torch_alloc {

// The torch version (major.minor) whose allocator the rules and the replay were checked against.
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
// nullopt with `error` set for anything PyTorch would refuse or the rules do not cover
// (backend:cudaMallocAsync). Settings for pinned host memory and release_lock_on_cudamalloc are
// accepted and change nothing here.
std::optional<AllocatorConfig> parse_alloc_conf(std::string_view text, std::string* error);

// The size PyTorch gives a request (round_size).
uint64_t round_size(const AllocatorConfig& c, uint64_t size);
// The pool of a rounded size: the small pool's up to kSmallSize.
inline bool small_pool(uint64_t rounded) {
  return rounded <= kSmallSize;
}
// The segment PyTorch would cudaMalloc for a rounded size (get_allocation_size).
uint64_t allocation_size(const AllocatorConfig& c, uint64_t rounded);
// Whether a free block of `block` bytes taken for a request of `rounded` bytes is split, leaving
// the rest free (should_split); when not, the whole block is the tensor's.
bool should_split(const AllocatorConfig& c, bool small, uint64_t block, uint64_t rounded);

// Empty when the rules and the replay cover this torch version ("2.11.0+cu130"); else why not.
std::string unmodelled_torch(std::string_view version);

}  // namespace cumemtrace::analysis::torch_alloc
