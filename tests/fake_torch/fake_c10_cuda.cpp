// A stand-in for PyTorch's libc10_cuda.so (torch 2.11 layout), our own code, for GPU-less tests of
// the block-level capture. What cumemtrace relies on is reproduced exactly:
//  - the exported data symbol c10::cuda::CUDACachingAllocator::allocator (std::atomic of the
//    allocator pointer), and LOCAL .symtab symbols with PyTorch's mangled names: the vtable of
//    c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator and its virtual
//    attachAllocatorTraceTracker(std::function<void(const c10::CachingDeviceAllocator::
//    TraceEntry&)>) (the namespaces mirror PyTorch's so that the names mangle the same);
//  - TraceEntry from torch/include/c10/core/CachingDeviceAllocator.h, the fake's header, declared
//    as 2.11 declares it (static_asserts below);
//  - trackers called on the allocating/freeing thread with the allocator's recursive mutex held.
// The allocator follows PyTorch's caching rules closely enough for exact block layouts: requests
// rounded to 512 B; small pool (<= 1 MiB) in 2 MiB segments, always split; large pool in 20 MiB
// segments below 10 MiB, else the request rounded to 2 MiB; large blocks split only when more
// than 1 MiB remains (with expandable segments: when at least 512 B remain); best fit; freed blocks
// merge with free neighbours; empty_cache releases wholly free segments. With expandable segments
// each pool reserves one VA range and maps pages (2 MiB small, 20 MiB large) at its end as it
// grows; empty_cache unmaps free whole pages at the end. Segments come from the (fake) driver the
// way cudart reaches it (cuGetProcAddress). The Python fake (torch/__init__.py) drives it through
// the extern "C" functions at the end.
// PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync stands for PyTorch's other backend: every
// tensor is one cuMemAllocAsync/cuMemFreeAsync on the default stream, empty_cache trims the
// device's pool to 0 (cuMemPoolTrimTo), and no trace tracker is ever called.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "c10/core/CachingDeviceAllocator.h"
#include "gpa_loader.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace c10 {
namespace CachingDeviceAllocator {
// The offsets of torch 2.11 on x86-64, which the preload's layout 1 reads.
static_assert(offsetof(TraceEntry, device_) == 4);
static_assert(offsetof(TraceEntry, addr_) == 8);
static_assert(offsetof(TraceEntry, context_) == 16);
static_assert(offsetof(TraceEntry, stream_) == 32);
static_assert(offsetof(TraceEntry, size_) == 40);
static_assert(offsetof(TraceEntry, mempool_) == 48);
}  // namespace CachingDeviceAllocator

namespace cuda::CUDACachingAllocator {

using CachingDeviceAllocator::TraceEntry;
using AllocatorTraceTracker = std::function<void(const TraceEntry&)>;

class CUDAAllocator {
 public:
  virtual ~CUDAAllocator() = default;
  virtual void* raw_alloc(size_t size) = 0;
  virtual void raw_delete(void* ptr) = 0;
  virtual void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) = 0;
};

namespace Native {

constexpr size_t kMinBlock = 512, kSmallSize = 1 << 20, kSmallBuffer = 2 << 20,
                 kLargeBuffer = 20 << 20, kMinLargeAlloc = 10 << 20, kRoundLarge = 2 << 20;

struct Block {
  uintptr_t addr;
  size_t size;
  size_t requested = 0;
  bool allocated = false;
  bool pending = false;  // free requested, completion waits (record_stream)
  uintptr_t segment;     // the segment (or expandable range) it belongs to
  bool small_pool;
};

class NativeCachingAllocator : public CUDAAllocator {
 public:
  void* raw_alloc(size_t size) override { return malloc(size); }
  void raw_delete(void* ptr) override { free(ptr, false); }
  void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) override {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    trackers_.push_back(std::move(tracker));
  }

  bool init();
  // The calling thread's device is the allocator's (c10::cuda::set_device, as each of autograd's
  // device threads does when it starts).
  bool set_device_of_thread();
  __attribute__((noinline)) void* malloc(size_t size);  // the tests name its frame
  void free(void* ptr, bool deferred);
  void complete_pending();
  void empty_cache();
  void set_limit(size_t bytes) { limit_ = bytes; }
  void set_expandable(bool on) { expandable_ = on; }
  void set_async(bool on) { async_ = on; }
  size_t reserved() const { return reserved_; }

 private:
  // Never inlined (as evaluate_function and thread_main in fake_torch_cpu.cpp): the e2e tests
  // name its frame first, above malloc's.
  __attribute__((noinline)) void trace(TraceEntry::Action a, size_t addr, size_t size) {
    if (trackers_.empty()) return;
    TraceEntry e{};
    e.action_ = a;
    e.device_ = 0;
    e.addr_ = addr;
    e.stream_ = nullptr;
    e.size_ = size;
    for (auto& t : trackers_) t(e);
  }
  bool small(size_t rounded) const { return rounded <= kSmallSize; }
  std::map<uintptr_t, Block>::iterator best_fit(bool small_pool, size_t rounded);
  bool new_segment(bool small_pool, size_t rounded);
  bool grow_expandable(bool small_pool, size_t rounded);
  void merge_free(std::map<uintptr_t, Block>::iterator it);
  void release_block(uintptr_t addr);

  std::recursive_mutex mutex_;
  std::vector<AllocatorTraceTracker> trackers_;
  cumemtrace::testprog::DriverEntryPoints d_{};
  CUcontext ctx_ = nullptr;
  bool ready_ = false;
  bool expandable_ = false;
  bool async_ = false;  // backend:cudaMallocAsync
  size_t limit_ = 0;    // set_per_process_memory_fraction, in bytes (0: none)
  size_t reserved_ = 0;
  std::map<uintptr_t, Block> blocks_;                      // every block by address
  std::map<uintptr_t, std::pair<size_t, bool>> segments_;  // cudaMalloc'd: size, small pool
  struct Expandable {
    CUdeviceptr base = 0;
    size_t mapped = 0;
    std::vector<CUmemGenericAllocationHandle> pages;
  } exp_[2];  // [0] large, [1] small
};

bool NativeCachingAllocator::init() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (ready_) return true;
  if (!cumemtrace::testprog::load_driver_entry_points(&d_) || d_.init(0) != CUDA_SUCCESS) {
    return false;
  }
  if (d_.primaryCtxRetain(&ctx_, 0) != CUDA_SUCCESS || d_.ctxSetCurrent(ctx_) != CUDA_SUCCESS) {
    return false;
  }
  ready_ = true;
  return true;
}

bool NativeCachingAllocator::set_device_of_thread() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return ready_ && d_.ctxSetCurrent(ctx_) == CUDA_SUCCESS;
}

std::map<uintptr_t, Block>::iterator NativeCachingAllocator::best_fit(bool small_pool,
                                                                      size_t rounded) {
  auto best = blocks_.end();
  for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
    const Block& b = it->second;
    if (b.allocated || b.pending || b.small_pool != small_pool || b.size < rounded) continue;
    if (best == blocks_.end() || b.size < best->second.size) best = it;
  }
  return best;
}

bool NativeCachingAllocator::new_segment(bool small_pool, size_t rounded) {
  const size_t size = small_pool ? kSmallBuffer
                      : rounded < kMinLargeAlloc
                          ? kLargeBuffer
                          : (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
  if (limit_ && reserved_ + size > limit_) return false;
  CUdeviceptr p = 0;
  if (d_.memAlloc(&p, size) != CUDA_SUCCESS) return false;
  reserved_ += size;
  segments_[p] = {size, small_pool};
  blocks_[p] = Block{p, size, 0, false, false, p, small_pool};
  trace(TraceEntry::SEGMENT_ALLOC, p, size);
  return true;
}

// Maps pages at the end of the pool's range until its free tail holds `rounded` bytes.
bool NativeCachingAllocator::grow_expandable(bool small_pool, size_t rounded) {
  Expandable& e = exp_[small_pool ? 1 : 0];
  const size_t page = small_pool ? kSmallBuffer : kLargeBuffer;
  const size_t kRange = size_t{1} << 36;
  if (!e.base && d_.memAddressReserve(&e.base, kRange, 0, 0, 0) != CUDA_SUCCESS) return false;
  // The free block that ends at the mapped end, if any, is extended.
  size_t tail_free = 0;
  if (e.mapped) {
    auto it = blocks_.upper_bound(e.base + e.mapped - 1);
    --it;
    if (!it->second.allocated && !it->second.pending) tail_free = it->second.size;
  }
  const size_t need = rounded > tail_free ? rounded - tail_free : 0;
  const size_t pages = (need + page - 1) / page;
  if (pages == 0) return true;
  if (limit_ && reserved_ + pages * page > limit_) return false;
  const uintptr_t start = e.base + e.mapped;
  for (size_t i = 0; i < pages; ++i) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h = 0;
    if (d_.memCreate(&h, page, &prop, 0) != CUDA_SUCCESS) return false;
    if (d_.memMap(start + i * page, page, 0, h, 0) != CUDA_SUCCESS) return false;
    e.pages.push_back(h);
  }
  e.mapped += pages * page;
  reserved_ += pages * page;
  blocks_[start] = Block{start, pages * page, 0, false, false, e.base, small_pool};
  merge_free(blocks_.find(start));
  trace(TraceEntry::SEGMENT_MAP, start, pages * page);
  return true;
}

void NativeCachingAllocator::merge_free(std::map<uintptr_t, Block>::iterator it) {
  auto next = std::next(it);
  if (next != blocks_.end() && !next->second.allocated && !next->second.pending &&
      next->second.segment == it->second.segment && it->first + it->second.size == next->first) {
    it->second.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (!prev->second.allocated && !prev->second.pending &&
        prev->second.segment == it->second.segment &&
        prev->first + prev->second.size == it->first) {
      prev->second.size += it->second.size;
      blocks_.erase(it);
    }
  }
}

void* NativeCachingAllocator::malloc(size_t size) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (async_) {
    CUdeviceptr p = 0;
    return d_.memAllocAsync(&p, size, nullptr) == CUDA_SUCCESS ? reinterpret_cast<void*>(p)
                                                               : nullptr;
  }
  const size_t rounded =
      size < kMinBlock ? kMinBlock : (size + kMinBlock - 1) / kMinBlock * kMinBlock;
  const bool small_pool = small(rounded);
  auto it = best_fit(small_pool, rounded);
  if (it == blocks_.end()) {
    const bool grown =
        expandable_ ? grow_expandable(small_pool, rounded) : new_segment(small_pool, rounded);
    if (!grown) {
      empty_cache();
      const bool retried =
          expandable_ ? grow_expandable(small_pool, rounded) : new_segment(small_pool, rounded);
      if (!retried) {
        size_t free_bytes = 0, total = 0;
        d_.memGetInfo(&free_bytes, &total);
        trace(TraceEntry::OOM, free_bytes, size);
        return nullptr;
      }
    }
    it = best_fit(small_pool, rounded);
    if (it == blocks_.end()) return nullptr;
  }
  Block& b = it->second;
  const size_t remaining = b.size - rounded;
  // PyTorch's should_split(): under expandable segments every pool splits off any remainder.
  if (small_pool || expandable_ ? remaining >= kMinBlock : remaining > kSmallSize) {
    blocks_[b.addr + rounded] =
        Block{b.addr + rounded, remaining, 0, false, false, b.segment, b.small_pool};
    b.size = rounded;
  }
  b.allocated = true;
  b.requested = size;
  trace(TraceEntry::ALLOC, b.addr, size);
  return reinterpret_cast<void*>(b.addr);
}

void NativeCachingAllocator::free(void* ptr, bool deferred) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (async_) {
    d_.memFreeAsync(reinterpret_cast<CUdeviceptr>(ptr), nullptr);
    return;
  }
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == blocks_.end() || !it->second.allocated) return;
  Block& b = it->second;
  b.allocated = false;
  trace(TraceEntry::FREE_REQUESTED, b.addr, b.requested);
  if (deferred) {
    b.pending = true;
    return;
  }
  trace(TraceEntry::FREE_COMPLETED, b.addr, b.requested);
  merge_free(it);
}

void NativeCachingAllocator::complete_pending() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  std::vector<uintptr_t> done;
  for (auto& [a, b] : blocks_) {
    if (b.pending) done.push_back(a);
  }
  for (uintptr_t a : done) {
    Block& b = blocks_[a];
    b.pending = false;
    trace(TraceEntry::FREE_COMPLETED, b.addr, b.requested);
    merge_free(blocks_.find(a));
  }
}

void NativeCachingAllocator::empty_cache() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (async_) {
    CUmemoryPool pool = nullptr;
    if (d_.deviceGetMemPool(&pool, 0) == CUDA_SUCCESS) d_.memPoolTrimTo(pool, 0);
    return;
  }
  for (auto it = segments_.begin(); it != segments_.end();) {
    auto b = blocks_.find(it->first);
    if (b != blocks_.end() && !b->second.allocated && !b->second.pending &&
        b->second.size == it->second.first) {
      d_.memFree(it->first);
      reserved_ -= it->second.first;
      trace(TraceEntry::SEGMENT_FREE, it->first, it->second.first);
      blocks_.erase(b);
      it = segments_.erase(it);
    } else {
      ++it;
    }
  }
  for (int pool = 0; pool < 2; ++pool) {
    Expandable& e = exp_[pool];
    if (!e.mapped) continue;
    const size_t page = pool ? kSmallBuffer : kLargeBuffer;
    auto last = std::prev(blocks_.upper_bound(e.base + e.mapped - 1));
    Block& b = last->second;
    if (b.allocated || b.pending) continue;
    // Whole free pages at the end of the mapped range.
    const uintptr_t first_page = (b.addr - e.base + page - 1) / page * page + e.base;
    const size_t pages = (e.base + e.mapped - first_page) / page;
    if (!pages) continue;
    for (size_t i = 0; i < pages; ++i) {
      d_.memUnmap(first_page + i * page, page);
      d_.memRelease(e.pages.back());
      e.pages.pop_back();
    }
    e.mapped -= pages * page;
    reserved_ -= pages * page;
    if (first_page == b.addr) {
      blocks_.erase(last);
    } else {
      b.size = first_page - b.addr;
    }
    trace(TraceEntry::SEGMENT_UNMAP, first_page, pages * page);
  }
}

}  // namespace Native

// PyTorch's one exported anchor.
__attribute__((visibility("default"))) std::atomic<CUDAAllocator*> allocator{nullptr};

}  // namespace cuda::CUDACachingAllocator
}  // namespace c10

namespace {

using c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator;

NativeCachingAllocator* native() {
  static auto* a = new NativeCachingAllocator();  // never destroyed, as PyTorch's
  return a;
}

}  // namespace

// --- what the fake torch package calls (ctypes) ------------------------------------------------

// CUDA's lazy initialisation: the driver, the context, and the allocator object published.
FAKE_EXPORT int fake_torch_cuda_init(int expandable, int async_backend) {
  NativeCachingAllocator* a = native();
  a->set_expandable(expandable != 0);
  a->set_async(async_backend != 0);
  if (!a->init()) return -1;
  c10::cuda::CUDACachingAllocator::allocator.store(a);
  return 0;
}
FAKE_EXPORT int fake_torch_set_device_of_thread() {
  return native()->set_device_of_thread() ? 0 : -1;
}
FAKE_EXPORT void* fake_torch_malloc(size_t size) {
  return native()->malloc(size);
}
FAKE_EXPORT void fake_torch_free(void* p, int deferred) {
  native()->free(p, deferred != 0);
}
FAKE_EXPORT void fake_torch_complete_pending() {
  native()->complete_pending();
}
FAKE_EXPORT void fake_torch_empty_cache() {
  native()->empty_cache();
}
FAKE_EXPORT void fake_torch_set_limit(size_t bytes) {
  native()->set_limit(bytes);
}
FAKE_EXPORT size_t fake_torch_reserved() {
  return native()->reserved();
}
