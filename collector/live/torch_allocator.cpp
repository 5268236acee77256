#include "live/torch_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <set>

#include "live/key_value_text.h"
#include "pytorch/torch_allocator_rules.h"

namespace cumemtrace::collect {

using snap::Action;
namespace rules = analysis::torch_alloc;

bool TorchAllocator::on_block(const Record& r, int64_t t, int32_t stack) {
  const auto& ev = r.ev;
  const int device = sane_device(ev.device);
  const uint64_t addr = ev.addr, size = ev.size;
  auto entry = [&](Action a, uint64_t entry_addr, uint64_t device_free = 0) {
    trace_.push(device, {.action = a,
                         .addr = entry_addr,
                         .size = size,
                         .stream = ev.stream,
                         .time_us = t,
                         .stack = stack,
                         .device_free = device_free,
                         .tid = ev.tid,
                         .source = snap::Source::kPytorch});
  };
  switch (static_cast<wire::TorchAction>(ev.aux)) {
    case wire::TorchAction::kAlloc:
      blocks_[addr] = Block{size, ev.stream, stack, -1, false};
      entry(Action::kAlloc, addr);
      break;
    case wire::TorchAction::kFreeRequested:
      if (auto it = blocks_.find(addr); it != blocks_.end()) {
        it->second.pending_free = true;
        it->second.free_stack = stack;
      }
      entry(Action::kFreeRequested, addr);
      break;
    case wire::TorchAction::kFreeCompleted:
      // Recorded without a walk: PyTorch's context for it is its request's, or the allocation's
      // when the request is unknown (requested before tracing started).
      if (auto it = blocks_.find(addr); it != blocks_.end()) {
        if (stack < 0) stack = it->second.pending_free ? it->second.free_stack : it->second.stack;
        blocks_.erase(it);
      }
      entry(Action::kFreeCompleted, addr);
      break;
    case wire::TorchAction::kSegmentAlloc:
      settle_driver_ooms(device);
      memory_.adopt_allocation(addr);
      segments_[addr] = Segment{size, device, ev.stream, stack, size == rules::kSmallBuffer};
      entry(Action::kSegmentAlloc, addr);
      break;
    case wire::TorchAction::kSegmentFree:
      segments_.erase(addr);
      entry(Action::kSegmentFree, addr);
      break;
    case wire::TorchAction::kSegmentMap: {
      // The pages PyTorch just mapped (one cuMemMap each): small-pool pages are 2 MiB.
      settle_driver_ooms(device);
      const auto adopted = memory_.adopt_mappings(addr, size, rules::kSmallBuffer);
      const bool small = adopted.any ? adopted.all_small : size == rules::kSmallBuffer;
      mapped_[addr] = Segment{size, device, ev.stream, stack, small};
      entry(Action::kSegmentMap, addr);
      break;
    }
    case wire::TorchAction::kSegmentUnmap:
      unmap(addr, size);
      entry(Action::kSegmentUnmap, addr);
      break;
    case wire::TorchAction::kOom:  // addr is the device's free bytes, size the request
      settle_driver_ooms(device);
      entry(Action::kOom, 0, addr);
      return true;
    case wire::TorchAction::kSnapshot:
    default:
      break;
  }
  return false;
}

void TorchAllocator::settle_driver_ooms(int device) {
  const auto it = driver_ooms_.find(device);
  if (it == driver_ooms_.end()) return;
  for (int i = 0; i < it->second; ++i) trace_.adopt_oom(device);
  driver_ooms_.erase(it);
}

// Subtracts [addr, addr + size) from the mapped pieces (an unmap may cut a piece).
void TorchAllocator::unmap(uint64_t addr, uint64_t size) {
  const uint64_t end = addr + size;
  auto it = mapped_.upper_bound(addr);
  if (it != mapped_.begin()) --it;
  while (it != mapped_.end() && it->first < end) {
    const uint64_t b = it->first, e = b + it->second.size;
    if (e <= addr) {
      ++it;
      continue;
    }
    Segment piece = it->second;
    it = mapped_.erase(it);
    if (b < addr) {
      Segment head = piece;
      head.size = addr - b;
      mapped_[b] = head;
    }
    if (e > end) {
      Segment tail = piece;
      tail.size = e - end;
      it = mapped_.emplace(end, tail).first;
      break;
    }
  }
}

void TorchAllocator::on_info(const std::string& text, int64_t t) {
  std::map<std::string, std::string> kv;
  for_each_key_value(text,
                     [&](const std::string& key, const std::string& value) { kv[key] = value; });
  const std::string event = kv.count("event") ? kv["event"] : "";
  if (event == "alloc_conf") {
    alloc_confs_.push_back({t, kv["alloc_conf"]});
  } else if (event == "memory_fraction") {
    snap::MemoryFractionChange m;
    m.time_us = t;
    m.device = sane_device(static_cast<int>(std::strtol(kv["device"].c_str(), nullptr, 10)));
    m.fraction = kv["fraction"];
    m.allowed_bytes = std::strtoull(kv["allowed_bytes"].c_str(), nullptr, 10);
    m.device_total = std::strtoull(kv["device_total"].c_str(), nullptr, 10);
    memory_fractions_.push_back(std::move(m));
  } else if (event == "private_pool") {
    if (kv["kind"] == "cuda_graph" || kv["kind"] == "mempool") {
      private_pools_.push_back({t, kv["kind"]});
    }
  } else {
    snap::PytorchInfo info;
    info.version = kv["version"];
    info.backend = kv["backend"];
    info.capture = kv["capture"];
    info.why = kv["why"];
    info.expandable_segments = kv["expandable_segments"] == "1";
    if (info.capture != "blocks" && info.capture != "driver") info.capture = "off";
    if (kv.count("alloc_conf")) alloc_confs_.insert(alloc_confs_.begin(), {t, kv["alloc_conf"]});
    info_ = std::move(info);
  }
  if (info_) {
    info_->alloc_confs = alloc_confs_;
    info_->memory_fractions = memory_fractions_;
    info_->private_pools = private_pools_;
  }
  // The rules the written blocks follow: the last configuration PyTorch accepted (one it
  // refused never took effect), else the capture's expandable_segments.
  config_ = {};
  for (auto it = alloc_confs_.rbegin(); it != alloc_confs_.rend(); ++it) {
    if (auto c = analysis::torch_alloc::parse_alloc_conf(it->alloc_conf, nullptr)) {
      config_ = std::move(*c);
      break;
    }
  }
  if (info_ && info_->expandable_segments) config_.expandable_segments = true;
}

uint64_t TorchAllocator::allocated() const {
  // The blocks as the written segments tile them (PyTorch's block bytes, what
  // memory_allocated() counts), not the requests.
  uint64_t n = 0;
  std::set<uint64_t> tiled;
  for_each_segment([&](uint64_t addr, const Segment& g, uint64_t total, bool expandable) {
    tile(addr, g, total, expandable, [&](uint64_t a, uint64_t size, const Block& k) {
      tiled.insert(a);
      if (!k.pending_free) n += size;
    });
  });
  // A block no written segment holds (its segment not seen) counts its rounded size.
  if (tiled.size() < blocks_.size()) {
    for (const auto& [a, k] : blocks_) {
      if (!k.pending_free && !tiled.count(a)) n += rules::round_size(config_, k.requested);
    }
  }
  return n;
}

void TorchAllocator::add_reserved(std::vector<uint64_t>& reserved) const {
  for (const auto* segs : {&segments_, &mapped_}) {
    for (const auto& [addr, seg] : *segs) {
      const auto d = static_cast<size_t>(seg.device);
      if (d < reserved.size()) reserved[d] += seg.size;
    }
  }
}

template <typename F>
void TorchAllocator::tile(uint64_t addr, const Segment& g, uint64_t total, bool expandable,
                          F&& block) const {
  const uint64_t seg_end = addr + total;
  const bool split_any = g.small || expandable || (info_ && info_->expandable_segments);
  uint64_t cursor = addr;
  for (auto it = blocks_.lower_bound(addr); it != blocks_.end() && it->first < seg_end; ++it) {
    const uint64_t a = it->first;
    if (a < cursor) continue;  // overlaps the previous block: inconsistent input, skip it
    const auto next_it = std::next(it);
    const uint64_t next =
        next_it != blocks_.end() && next_it->first < seg_end ? next_it->first : seg_end;
    const uint64_t rounded = rules::round_size(config_, it->second.requested);
    uint64_t end = std::min(a + rounded, next);
    // PyTorch's should_split() (the rules): a remainder it does not split off stays in the block.
    if (!rules::should_split(config_, split_any, next - a, end - a)) end = next;
    block(a, end - a, it->second);
    cursor = end;
  }
}

template <typename F>
void TorchAllocator::for_each_segment(F&& segment) const {
  for (const auto& [addr, g] : segments_) segment(addr, g, g.size, false);
  // Maximal runs of mapped pieces are the segments of expandable segments.
  for (auto it = mapped_.begin(); it != mapped_.end();) {
    const uint64_t start = it->first;
    const Segment& first = it->second;
    uint64_t end = start + first.size;
    for (++it; it != mapped_.end() && it->first == end && it->second.device == first.device &&
               it->second.small == first.small;
         ++it) {
      end += it->second.size;
    }
    segment(start, first, end - start, true);
  }
}

void TorchAllocator::write_segment(snap::Snapshot& s, uint64_t addr, const Segment& g,
                                   uint64_t total, bool expandable) const {
  snap::Segment seg;
  seg.source = snap::Source::kPytorch;
  seg.device = g.device;
  seg.address = addr;
  seg.total_size = total;
  seg.stream = g.stream;
  seg.segment_type = g.small ? "small" : "large";
  seg.is_expandable = expandable;
  seg.stack = g.stack;
  uint64_t cursor = addr;
  auto inactive = [&](uint64_t from, uint64_t to) {
    if (to > from) seg.blocks.push_back(snap::Block{from, to - from, 0, "inactive", -1});
  };
  tile(addr, g, total, expandable, [&](uint64_t a, uint64_t size, const Block& k) {
    inactive(cursor, a);
    seg.blocks.push_back(snap::Block{a, size, k.requested,
                                     k.pending_free ? "active_pending_free" : "active_allocated",
                                     k.stack});
    seg.active_size += size;
    if (!k.pending_free) {
      seg.allocated_size += size;
      seg.requested_size += k.requested;
    }
    cursor = a + size;
  });
  inactive(cursor, addr + total);
  s.segments.push_back(std::move(seg));
}

void TorchAllocator::write_segments(snap::Snapshot& s) const {
  for_each_segment([&](uint64_t addr, const Segment& g, uint64_t total, bool expandable) {
    write_segment(s, addr, g, total, expandable);
  });
}

}  // namespace cumemtrace::collect
