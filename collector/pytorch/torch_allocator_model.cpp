// PyTorch's caching allocator (torch 2.11), modelled step for step: see the header. The names of
// the private functions are PyTorch's, so each can be read next to the function it models.
#include "pytorch/torch_allocator_model.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace cumemtrace::analysis::torch_alloc {

namespace {

// An expandable segment's address range: 1 1/8 of the device's memory in PyTorch. The model has
// no device size, so it reserves 1 TiB of pages; only whole-range sizes are compared with each
// other, so the choice changes no decision short of a 1 TiB request.
constexpr uint64_t kExpandableRange = uint64_t{1} << 40;
// Far above any address CUDA hands out (0x7f..: 2^47), below 2^53 so JSON keeps it exact.
constexpr uint64_t kFirstModelAddress = uint64_t{1} << 52;

}  // namespace

struct CachingAllocatorModel::Block {
  uint64_t ptr = 0;
  uint64_t size = 0;
  uint64_t stream = 0;
  Pool* pool = nullptr;
  int32_t prev = -1;
  int32_t next = -1;
  int32_t expandable = -1;  // index into expandable_, -1 for a cudaMalloc'd segment
  bool allocated = false;
  bool mapped = true;
  int64_t gc_count_base = 0;
  bool is_split() const { return prev >= 0 || next >= 0; }
};

struct CachingAllocatorModel::Pool {
  Pool(bool small_pool, const std::vector<Block>* b)
      : blocks(SizeOrder{b}), unmapped(AddressOrder{b}), small(small_pool) {}
  std::set<int32_t, SizeOrder> blocks;       // free mapped blocks: best fit
  std::set<int32_t, AddressOrder> unmapped;  // unmapped ranges of expandable segments
  bool small;
  int64_t get_free_blocks_call_count = 0;
};

struct CachingAllocatorModel::Expandable {
  uint64_t base = 0;
  uint64_t page = 0;
  uint64_t stream = 0;
  std::vector<bool> pages;  // mapped
};

bool CachingAllocatorModel::SizeOrder::operator()(int32_t a, int32_t b) const {
  const Block& x = (*blocks)[static_cast<size_t>(a)];
  const Block& y = (*blocks)[static_cast<size_t>(b)];
  if (x.stream != y.stream) return x.stream < y.stream;
  if (x.size != y.size) return x.size < y.size;
  return x.ptr < y.ptr;
}

bool CachingAllocatorModel::AddressOrder::operator()(int32_t a, int32_t b) const {
  const Block& x = (*blocks)[static_cast<size_t>(a)];
  const Block& y = (*blocks)[static_cast<size_t>(b)];
  if (x.stream != y.stream) return x.stream < y.stream;
  return x.ptr < y.ptr;
}

CachingAllocatorModel::CachingAllocatorModel(AllocatorConfig config, std::optional<Budget> budget,
                                             Hooks hooks)
    : c_(std::move(config)),
      budget_(budget),
      hooks_(std::move(hooks)),
      small_(new Pool(true, &blocks_)),
      large_(new Pool(false, &blocks_)),
      next_address_(kFirstModelAddress) {
  // Two slots serve as search keys (PyTorch's Block(device, stream, size) with a null pointer).
  blocks_.resize(2);
}

CachingAllocatorModel::~CachingAllocatorModel() {
  delete small_;
  delete large_;
}

uint64_t CachingAllocatorModel::inactive_split() const {
  uint64_t n = 0;
  for (const Pool* pool : {small_, large_}) {
    for (int32_t b : pool->blocks) {
      const Block& x = blocks_[static_cast<size_t>(b)];
      if (x.is_split()) n += x.size;
    }
  }
  return n;
}

uint64_t CachingAllocatorModel::block_size(int32_t b) const {
  return blocks_[static_cast<size_t>(b)].size;
}

uint64_t CachingAllocatorModel::block_address(int32_t b) const {
  return blocks_[static_cast<size_t>(b)].ptr;
}

std::vector<SegmentEvent> CachingAllocatorModel::take_events() {
  std::vector<SegmentEvent> out;
  out.swap(events_);
  return out;
}

int32_t CachingAllocatorModel::new_block(uint64_t ptr, uint64_t size, uint64_t stream, Pool* pool) {
  int32_t id;
  if (!unused_.empty()) {
    id = unused_.back();
    unused_.pop_back();
  } else {
    id = static_cast<int32_t>(blocks_.size());
    blocks_.emplace_back();
  }
  Block& b = blocks_[static_cast<size_t>(id)];
  b = Block{};
  b.ptr = ptr;
  b.size = size;
  b.stream = stream;
  b.pool = pool;
  return id;
}

void CachingAllocatorModel::delete_block(int32_t b) {
  unused_.push_back(b);
}

void CachingAllocatorModel::insert_free(int32_t b) {
  Block& x = blocks_[static_cast<size_t>(b)];
  x.gc_count_base = x.pool->get_free_blocks_call_count;
  x.pool->blocks.insert(b);
}

uint64_t CachingAllocatorModel::fresh_address(uint64_t size) {
  const uint64_t a = next_address_;
  next_address_ += (size + kSmallBuffer - 1) / kSmallBuffer * kSmallBuffer + kSmallBuffer;
  return a;
}

int32_t CachingAllocatorModel::malloc(uint64_t orig_size, uint64_t stream) {
  const uint64_t size = round_size(c_, orig_size);
  Pool& pool = small_pool(size) ? *small_ : *large_;
  const uint64_t alloc_size = allocation_size(c_, size);
  int32_t block = -1;
  bool found = get_free_block(pool, size, stream, &block);
  if (!found) {
    if (budget_ && budget_->fraction && c_.garbage_collection_threshold > 0) {
      garbage_collect_cached_blocks();
    }
    found = alloc_block(pool, size, alloc_size, stream, &block) ||
            (release_available_cached_blocks(pool, size, stream) &&
             alloc_block(pool, size, alloc_size, stream, &block)) ||
            (release_cached_blocks(), alloc_block(pool, size, alloc_size, stream, &block));
  }
  if (!found) return -1;
  return alloc_found_block(block, size, should_split(block, size));
}

bool CachingAllocatorModel::get_free_block(Pool& pool, uint64_t size, uint64_t stream,
                                           int32_t* out) {
  if (budget_ && budget_->fraction && c_.garbage_collection_threshold > 0) {
    ++pool.get_free_blocks_call_count;
  }
  Block& key = blocks_[0];
  key = Block{};
  key.stream = stream;
  key.size = size;
  auto it = pool.blocks.lower_bound(0);
  auto at = [&](auto i) -> Block& { return blocks_[static_cast<size_t>(*i)]; };
  if (it == pool.blocks.end() || at(it).stream != stream) return false;
  if (at(it).expandable >= 0) {
    if (c_.expandable_segments) {
      // An expandable block counts as the size it can grow to (its unmapped neighbour included).
      auto expandable_size = [&](const Block& b) {
        const Block* n = b.next >= 0 ? &blocks_[static_cast<size_t>(b.next)] : nullptr;
        return b.size + (n && !n->mapped ? n->size : 0);
      };
      auto next = std::next(it);
      while (at(it).expandable >= 0 && next != pool.blocks.end() && at(next).stream == stream &&
             expandable_size(at(next)) < expandable_size(at(it))) {
        it = next++;
      }
    } else {
      do {
        ++it;
      } while (it != pool.blocks.end() && at(it).expandable >= 0 && at(it).stream == stream);
      if (it == pool.blocks.end() || at(it).stream != stream) return false;
    }
  }
  if (size < c_.max_split_size && at(it).size >= c_.max_split_size) return false;
  if (size >= c_.max_split_size && at(it).size >= size + c_.max_non_split_rounding_size) {
    return false;
  }
  *out = *it;
  pool.blocks.erase(it);
  return true;
}

bool CachingAllocatorModel::alloc_block(Pool& pool, uint64_t size, uint64_t alloc_size,
                                        uint64_t stream, int32_t* out) {
  if (budget_ && budget_->fraction && reserved_ + alloc_size > budget_->bytes) return false;
  if (c_.expandable_segments) {
    *out = try_allocate_expandable_block(pool, stream, size);
    return *out >= 0;
  }
  if (budget_ && !budget_->fraction && reserved_ + alloc_size > budget_->bytes) return false;
  uint64_t ptr = hooks_.segment_address ? hooks_.segment_address(alloc_size, stream, false) : 0;
  if (!ptr) ptr = fresh_address(alloc_size);
  reserved_ += alloc_size;
  *out = new_block(ptr, alloc_size, stream, &pool);
  events_.push_back({snap::Action::kSegmentAlloc, ptr, alloc_size, stream});
  return true;
}

bool CachingAllocatorModel::release_available_cached_blocks(Pool& pool, uint64_t size,
                                                            uint64_t stream) {
  if (c_.max_split_size == UINT64_MAX) return false;
  Block& key = blocks_[0];
  key = Block{};
  key.stream = stream;
  key.size = size < c_.max_split_size ? c_.max_split_size : size;
  const uint64_t wanted = key.size;
  auto it = pool.blocks.lower_bound(0);
  auto at = [&](auto i) -> Block& { return blocks_[static_cast<size_t>(*i)]; };
  if (it == pool.blocks.end() || at(it).stream != stream || at(it).expandable >= 0) {
    // No single block is large enough: free oversize blocks, the largest first.
    if (it == pool.blocks.begin()) return false;
    uint64_t released = 0;
    --it;
    while (released < wanted && at(it).size >= c_.max_split_size && at(it).stream == stream) {
      auto cur = it;
      const bool is_first = cur == pool.blocks.begin();
      if (!is_first) --it;
      if (at(cur).expandable < 0) {
        released += at(cur).size;
        release_block(*cur);
      }
      if (is_first) break;
    }
    if (released < wanted) return false;
  } else {
    release_block(*it);
  }
  return true;
}

void CachingAllocatorModel::release_cached_blocks() {
  release_blocks(*large_);
  release_blocks(*small_);
}

void CachingAllocatorModel::release_blocks(Pool& pool) {
  std::vector<int32_t> to_unmap;
  for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
    const int32_t b = *it++;
    const Block& x = blocks_[static_cast<size_t>(b)];
    if (x.expandable >= 0) {
      to_unmap.push_back(b);
    } else if (!x.is_split()) {
      release_block(b);
    }
  }
  for (int32_t b : to_unmap) {
    unmap_block(b);
    Block& x = blocks_[static_cast<size_t>(b)];
    if (!x.is_split() && !x.mapped) {  // the whole range is unmapped: give it back
      x.pool->unmapped.erase(b);
      expandable_[static_cast<size_t>(x.expandable)].pages.clear();
      delete_block(b);
    }
  }
}

void CachingAllocatorModel::release_block(int32_t b) {
  Block& x = blocks_[static_cast<size_t>(b)];
  events_.push_back({snap::Action::kSegmentFree, x.ptr, x.size, x.stream});
  reserved_ -= x.size;
  x.pool->blocks.erase(b);
  delete_block(b);
}

void CachingAllocatorModel::garbage_collect_cached_blocks() {
  const auto threshold =
      static_cast<uint64_t>(c_.garbage_collection_threshold * static_cast<double>(budget_->bytes));
  if (reserved_ <= threshold) return;
  const uint64_t target = reserved_ - threshold;
  Pool& pool = *large_;
  auto age = [&](const Block& b) {
    return static_cast<uint64_t>(pool.get_free_blocks_call_count - b.gc_count_base);
  };
  uint64_t total_age = 0;
  int freeable = 0;
  for (int32_t b : pool.blocks) {
    const Block& x = blocks_[static_cast<size_t>(b)];
    if (!x.is_split()) {
      total_age += age(x);
      ++freeable;
    }
  }
  if (freeable == 0) return;
  uint64_t reclaimed = 0;
  bool freed = true;
  while (reclaimed < target && freed && freeable > 0) {
    const double threshold_age = static_cast<double>(total_age) / freeable;
    freed = false;
    for (auto it = pool.blocks.begin(); it != pool.blocks.end();) {
      const int32_t b = *it++;
      const Block& x = blocks_[static_cast<size_t>(b)];
      if (!x.is_split() && static_cast<double>(age(x)) >= threshold_age) {
        freed = true;
        reclaimed += x.size;
        total_age -= age(x);
        --freeable;
        release_block(b);
      }
    }
  }
}

bool CachingAllocatorModel::should_split(int32_t b, uint64_t size) const {
  const Block& x = blocks_[static_cast<size_t>(b)];
  return torch_alloc::should_split(c_, x.pool->small, x.size, size);
}

int32_t CachingAllocatorModel::alloc_found_block(int32_t b, uint64_t size, bool split) {
  if (split) {
    const int32_t remaining = b;
    Block& r = blocks_[static_cast<size_t>(remaining)];
    const int32_t nb = new_block(r.ptr, size, r.stream, r.pool);
    Block& n = blocks_[static_cast<size_t>(nb)];
    Block& rr = blocks_[static_cast<size_t>(remaining)];  // new_block may have grown blocks_
    n.expandable = rr.expandable;
    n.prev = rr.prev;
    if (n.prev >= 0) blocks_[static_cast<size_t>(n.prev)].next = nb;
    n.next = remaining;
    rr.prev = nb;
    rr.ptr += size;
    rr.size -= size;
    insert_free(remaining);
    b = nb;
  }
  Block& x = blocks_[static_cast<size_t>(b)];
  x.allocated = true;
  allocated_ += x.size;
  return b;
}

void CachingAllocatorModel::free(int32_t b) {
  Block& x = blocks_[static_cast<size_t>(b)];
  x.allocated = false;
  allocated_ -= x.size;
  const int32_t prev = x.prev, next = x.next;
  try_merge_blocks(b, prev);
  try_merge_blocks(b, next);
  insert_free(b);
}

uint64_t CachingAllocatorModel::try_merge_blocks(int32_t dst, int32_t src) {
  if (src < 0) return 0;
  Block& s = blocks_[static_cast<size_t>(src)];
  Block& d = blocks_[static_cast<size_t>(dst)];
  if (s.allocated || d.mapped != s.mapped) return 0;
  // Out of its set before its neighbour's key changes.
  if (s.mapped) {
    s.pool->blocks.erase(src);
  } else {
    s.pool->unmapped.erase(src);
  }
  if (d.prev == src) {  // [src dst]
    d.ptr = s.ptr;
    d.prev = s.prev;
    if (d.prev >= 0) blocks_[static_cast<size_t>(d.prev)].next = dst;
  } else {  // [dst src]
    d.next = s.next;
    if (d.next >= 0) blocks_[static_cast<size_t>(d.next)].prev = dst;
  }
  const uint64_t subsumed = s.size;
  d.size += subsumed;
  delete_block(src);
  return subsumed;
}

bool CachingAllocatorModel::allocatable(int32_t b) const {
  return b >= 0 && !blocks_[static_cast<size_t>(b)].allocated;
}

int32_t CachingAllocatorModel::find_expandable_block(Pool& pool, uint64_t stream, uint64_t size) {
  auto has_room = [&](int32_t b) {
    uint64_t bytes = 0;
    while (bytes < size && allocatable(b)) {
      bytes += blocks_[static_cast<size_t>(b)].size;
      b = blocks_[static_cast<size_t>(b)].next;
    }
    return bytes >= size;
  };
  Block& key = blocks_[1];
  key = Block{};
  key.stream = stream;
  for (auto it = pool.unmapped.lower_bound(1);
       it != pool.unmapped.end() && blocks_[static_cast<size_t>(*it)].stream == stream; ++it) {
    int32_t c = *it;
    if (allocatable(blocks_[static_cast<size_t>(c)].prev)) c = blocks_[static_cast<size_t>(c)].prev;
    if (has_room(c)) return c;
  }
  Expandable es;
  es.page = pool.small ? kSmallBuffer : c_.large_segment_size;
  es.stream = stream;
  const uint64_t range = kExpandableRange / es.page * es.page;
  es.base = hooks_.segment_address ? hooks_.segment_address(range, stream, true) : 0;
  if (!es.base) es.base = fresh_address(range);
  es.pages.assign(range / es.page, false);
  expandable_.push_back(std::move(es));
  const int32_t b = new_block(expandable_.back().base, range, stream, &pool);
  Block& x = blocks_[static_cast<size_t>(b)];
  x.mapped = false;
  x.expandable = static_cast<int32_t>(expandable_.size() - 1);
  pool.unmapped.insert(b);
  return b;
}

bool CachingAllocatorModel::map_block(int32_t b, uint64_t size) {
  Block* x = &blocks_[static_cast<size_t>(b)];
  Expandable& es = expandable_[static_cast<size_t>(x->expandable)];
  const uint64_t begin = (x->ptr - es.base) / es.page;
  const uint64_t end = (x->ptr + size - es.base + es.page - 1) / es.page;
  const uint64_t bytes = (end - begin) * es.page;
  if (budget_ && !budget_->fraction && reserved_ + bytes > budget_->bytes) return false;
  for (uint64_t p = begin; p < end; ++p) es.pages[p] = true;
  Pool& pool = *x->pool;
  pool.unmapped.erase(b);
  x->mapped = true;
  if (bytes < x->size) {
    const int32_t rest = new_block(x->ptr + bytes, x->size - bytes, x->stream, &pool);
    x = &blocks_[static_cast<size_t>(b)];
    Block& r = blocks_[static_cast<size_t>(rest)];
    r.mapped = false;
    r.expandable = x->expandable;
    r.prev = b;
    r.next = x->next;
    if (r.next >= 0) blocks_[static_cast<size_t>(r.next)].prev = rest;
    x->next = rest;
    pool.unmapped.insert(rest);
    x->size = bytes;
  }
  const uint64_t mapped_at = es.base + begin * es.page;
  try_merge_blocks(b, blocks_[static_cast<size_t>(b)].prev);
  try_merge_blocks(b, blocks_[static_cast<size_t>(b)].next);
  insert_free(b);
  reserved_ += bytes;
  events_.push_back({snap::Action::kSegmentMap, mapped_at, bytes, es.stream});
  return true;
}

int32_t CachingAllocatorModel::try_allocate_expandable_block(Pool& pool, uint64_t stream,
                                                             uint64_t size) {
  int32_t c = find_expandable_block(pool, stream, size);
  if (!blocks_[static_cast<size_t>(c)].mapped &&
      !map_block(c, std::min(blocks_[static_cast<size_t>(c)].size, size))) {
    return -1;
  }
  while (blocks_[static_cast<size_t>(c)].size < size) {
    const int32_t n = blocks_[static_cast<size_t>(c)].next;
    const uint64_t want =
        std::min(size - blocks_[static_cast<size_t>(c)].size, blocks_[static_cast<size_t>(n)].size);
    if (!map_block(n, want)) return -1;
    c = n;  // map_block merged the free block before it into n
  }
  pool.blocks.erase(c);
  return c;
}

void CachingAllocatorModel::unmap_block(int32_t b) {
  Block* x = &blocks_[static_cast<size_t>(b)];
  Expandable& es = expandable_[static_cast<size_t>(x->expandable)];
  // Whole pages inside the block only.
  const uint64_t begin = (x->ptr - es.base + es.page - 1) / es.page;
  const uint64_t end = (x->ptr + x->size - es.base) / es.page;
  if (begin >= end) return;
  const uint64_t at = es.base + begin * es.page;
  const uint64_t bytes = (end - begin) * es.page;
  Pool& pool = *x->pool;
  pool.blocks.erase(b);
  const uint64_t before = at - x->ptr;
  if (before > 0) {
    const int32_t f = new_block(x->ptr, before, x->stream, &pool);
    x = &blocks_[static_cast<size_t>(b)];
    Block& nb = blocks_[static_cast<size_t>(f)];
    nb.expandable = x->expandable;
    nb.prev = x->prev;
    if (nb.prev >= 0) blocks_[static_cast<size_t>(nb.prev)].next = f;
    nb.next = b;
    x->prev = f;
    insert_free(f);
  }
  const uint64_t after = x->size - (before + bytes);
  if (after > 0) {
    const int32_t f = new_block(at + bytes, after, x->stream, &pool);
    x = &blocks_[static_cast<size_t>(b)];
    Block& nb = blocks_[static_cast<size_t>(f)];
    nb.expandable = x->expandable;
    nb.next = x->next;
    if (nb.next >= 0) blocks_[static_cast<size_t>(nb.next)].prev = f;
    nb.prev = b;
    x->next = f;
    insert_free(f);
  }
  x->ptr = at;
  x->size = bytes;
  x->mapped = false;
  for (uint64_t p = begin; p < end; ++p) es.pages[p] = false;
  try_merge_blocks(b, blocks_[static_cast<size_t>(b)].prev);
  try_merge_blocks(b, blocks_[static_cast<size_t>(b)].next);
  blocks_[static_cast<size_t>(b)].pool->unmapped.insert(b);
  reserved_ -= bytes;
  events_.push_back({snap::Action::kSegmentUnmap, at, bytes, es.stream});
}

void CachingAllocatorModel::empty_cache() {
  release_cached_blocks();
}

std::vector<int32_t> CachingAllocatorModel::seed_segment(
    uint64_t addr, uint64_t size, uint64_t stream, bool small,
    const std::vector<std::pair<uint64_t, uint64_t>>& live) {
  Pool* pool = small ? small_ : large_;
  std::vector<int32_t> ids;
  std::vector<std::pair<int32_t, bool>> pieces;  // in address order, allocated
  uint64_t at = addr;
  auto piece = [&](uint64_t p, uint64_t n, bool allocated) {
    const int32_t b = new_block(p, n, stream, pool);
    blocks_[static_cast<size_t>(b)].allocated = allocated;
    pieces.push_back({b, allocated});
    if (allocated) {
      ids.push_back(b);
      allocated_ += n;
    }
  };
  for (const auto& [p, n] : live) {
    if (p > at) piece(at, p - at, false);
    piece(p, n, true);
    at = p + n;
  }
  if (at < addr + size) piece(at, addr + size - at, false);
  for (size_t i = 0; i < pieces.size(); ++i) {
    Block& b = blocks_[static_cast<size_t>(pieces[i].first)];
    b.prev = i ? pieces[i - 1].first : -1;
    b.next = i + 1 < pieces.size() ? pieces[i + 1].first : -1;
  }
  for (const auto& [b, allocated] : pieces) {
    if (!allocated) insert_free(b);
  }
  reserved_ += size;
  return ids;
}

}  // namespace cumemtrace::analysis::torch_alloc
