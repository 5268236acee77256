#include "live/device_allocations.h"

#include <algorithm>

#include "live/api_names.h"

namespace cumemtrace::collect {

using snap::Action;
using wire::Api;
using wire::Kind;

namespace {

// A failed release is reported right after it; older entries need not be kept for ever.
constexpr size_t kMaxReleasedHandles = 4096;

}  // namespace

void DeviceAllocations::anomaly(const char* kind, const Record& r, int64_t t, StackId stack) {
  anomaly(kind, r.ev.addr, static_cast<uint8_t>(r.ev.api), r.ev.tid, t, stack);
}

void DeviceAllocations::anomaly(const char* kind, uint64_t addr, uint8_t api, uint32_t tid,
                                int64_t t, StackId stack) {
  snap::Anomaly a;
  a.kind = kind;
  a.addr = addr;
  a.api = api_name(api);
  a.stack = stack;
  a.time_us = t;
  a.tid = tid;
  anomalies_.push_back(std::move(a));
}

void DeviceAllocations::push_alloc(const Live& l, uint64_t addr, int64_t t, uint32_t tid,
                                   bool async_pool) {
  const auto source = l.graph ? snap::Source::kGraph : snap::Source::kDriver;
  for (Action a : {Action::kSegmentAlloc, Action::kAlloc}) {
    trace_.push(l.device, {.action = a,
                           .addr = addr,
                           .size = l.size,
                           .stream = l.stream,
                           .time_us = t,
                           .stack = l.stack,
                           .tid = tid,
                           .stream_per_thread = l.per_thread,
                           .source = source,
                           .async_pool = async_pool});
  }
}

void DeviceAllocations::push_free(const Live& l, uint64_t addr, uint64_t stream, int64_t t,
                                  uint32_t tid, bool per_thread) {
  for (Action a : {Action::kFreeRequested, Action::kFreeCompleted, Action::kSegmentFree}) {
    trace_.push(l.device, {.action = a,
                           .addr = addr,
                           .size = l.size,
                           .stream = stream,
                           .time_us = t,
                           .tid = tid,
                           .stream_per_thread = per_thread,
                           .source = l.graph ? snap::Source::kGraph : snap::Source::kDriver});
  }
}

void DeviceAllocations::on_alloc(const Record& r, int64_t t, StackId stack) {
  const auto& ev = r.ev;
  const bool per_thread = ev.flags & wire::kFlagPerThreadStream;
  Live l{ev.size, sane_device(ev.device),       ev.stream, stack,
         t,       static_cast<uint8_t>(ev.api), per_thread};
  switch (ev.kind) {
    case Kind::kAlloc:
      live_[ev.addr] = l;
      freed_.erase(ev.addr);
      ledger_.grow(l.device, l.size, t, l.stack);
      // Both entries of a stream-ordered pool's allocation: the unit is made by segment_alloc.
      push_alloc(l, ev.addr, t, ev.tid,
                 ev.api == Api::kMemAllocAsync || ev.api == Api::kMemAllocFromPoolAsync);
      break;
    case Kind::kCreate:
      handles_[ev.addr] = Handle{l, 1, 0, true};
      released_handles_.erase(ev.addr);
      ledger_.grow(l.device, l.size, t, l.stack);
      break;
    case Kind::kHostAlloc:
      host_[ev.addr] = l;
      freed_.erase(ev.addr);
      break;
    case Kind::kReserve:
      reserved_[ev.addr] = l;
      break;
    case Kind::kMapImported:  // memory owned elsewhere: listed as imported, counts no bytes
      mapped_[ev.addr] = Mapping{l, ev.aux, false};
      break;
    case Kind::kMap:
      map(r, l, t, stack);
      break;
    default:
      break;
  }
}

void DeviceAllocations::map(const Record& r, Live l, int64_t t, StackId stack) {
  const auto& ev = r.ev;
  auto h = handles_.find(ev.aux);
  if (h == handles_.end()) {
    // Created before we could see it: mapped here, owned by nobody we know of.
    h = handles_.emplace(ev.aux, Handle{l, 1, 0, false}).first;
  }
  ++h->second.maps;
  if (h->second.owned) {
    l.device = h->second.l.device;
    mapped_[ev.addr] = Mapping{l, ev.aux, true};
    trace_.push(l.device, {.action = Action::kSegmentMap,
                           .addr = ev.addr,
                           .size = l.size,
                           .time_us = t,
                           .stack = stack,
                           .tid = ev.tid});
  } else {
    // Another process's memory (NCCL peers): visible here, not this process's segment.
    mapped_[ev.addr] = Mapping{l, ev.aux, false};
  }
}

void DeviceAllocations::on_free(const Record& r, int64_t t, StackId stack) {
  const auto& ev = r.ev;
  switch (ev.kind) {
    case Kind::kFree:
      free_device(r, t, stack);
      break;
    case Kind::kRelease: {
      auto it = handles_.find(ev.addr);
      if (it == handles_.end() || it->second.refs == 0) {
        anomaly("release_unknown_handle", r, t, stack);
        return;
      }
      --it->second.refs;
      drop_handle_if_unused(it);
      break;
    }
    case Kind::kHostFree: {
      auto it = host_.find(ev.addr);
      if (it == host_.end()) {
        auto f = freed_.find(ev.addr);
        if (f != freed_.end()) f->second.undoable = false;
        anomaly(f != freed_.end() ? "double_free" : "free_host_unknown_pointer", r, t, stack);
        return;
      }
      freed_[ev.addr] = it->second;
      freed_[ev.addr].undoable = true;
      host_.erase(it);
      break;
    }
    case Kind::kAddressFree:
      reserved_.erase(ev.addr);
      break;
    case Kind::kUnmapImported: {
      auto it = mapped_.find(ev.addr);
      if (it == mapped_.end() || it->second.owned ||
          it->second.l.api != static_cast<uint8_t>(Api::kIpcOpenMemHandle)) {
        anomaly("unmap_unknown_range", r, t, stack);
        return;
      }
      freed_[ev.addr] = it->second.l;
      freed_[ev.addr].undoable = true;
      mapped_.erase(it);
      break;
    }
    case Kind::kUnmap:
      unmap(r, t, stack);
      break;
    default:
      break;
  }
}

void DeviceAllocations::free_device(const Record& r, int64_t t, StackId stack) {
  const auto& ev = r.ev;
  auto it = live_.find(ev.addr);
  // A mapped buffer of external memory is released with cuMemFree.
  if (auto m = mapped_.find(ev.addr);
      it == live_.end() && m != mapped_.end() && !m->second.owned &&
      m->second.l.api == static_cast<uint8_t>(Api::kExternalMemoryGetMappedBuffer)) {
    Live gone = m->second.l;
    gone.undoable = true;
    gone.stream = m->second.handle;  // the external memory, for an undo
    freed_[ev.addr] = gone;
    mapped_.erase(m);
    return;
  }
  if (it == live_.end()) {
    auto f = freed_.find(ev.addr);
    if (f != freed_.end()) f->second.undoable = false;
    anomaly(f != freed_.end() ? "double_free" : "free_unknown_pointer", r, t, stack);
    return;
  }
  Live l = it->second;
  live_.erase(it);
  ledger_.shrink(l.device, l.size);
  const bool pt = ev.flags & wire::kFlagPerThreadStream;
  if (!l.torch_owned) push_free(l, ev.addr, ev.stream, t, ev.tid, pt);
  l.torch_owned = false;
  l.undoable = true;
  freed_[ev.addr] = l;
}

// One unmap may cover several mappings (PyTorch unmaps a run of expandable-segment pages).
void DeviceAllocations::unmap(const Record& r, int64_t t, StackId stack) {
  const auto& ev = r.ev;
  auto it = mapped_.lower_bound(ev.addr);
  if (it == mapped_.end() || it->first >= ev.addr + ev.size) {
    anomaly("unmap_unknown_range", r, t, stack);
    return;
  }
  while (it != mapped_.end() && it->first < ev.addr + ev.size) {
    const Mapping& m = it->second;
    if (m.owned && !m.l.torch_owned) {
      trace_.push(m.l.device, {.action = Action::kSegmentUnmap,
                               .addr = it->first,
                               .size = m.l.size,
                               .time_us = t,
                               .tid = ev.tid});
    }
    auto h = handles_.find(m.handle);
    if (h != handles_.end() && h->second.maps > 0) {
      --h->second.maps;
      drop_handle_if_unused(h);
    }
    it = mapped_.erase(it);
  }
}

// cuMemRetainAllocationHandle adds a reference to a handle we know (or, for memory mapped before we
// saw its handle, to one we learn of now); an import is a handle to memory owned elsewhere.
void DeviceAllocations::on_handle_reference(const Record& r, int64_t t, StackId stack) {
  const auto& ev = r.ev;
  if (ev.kind == Kind::kRetain) {
    auto h = handles_.find(ev.addr);
    if (h != handles_.end()) {
      ++h->second.refs;
      return;
    }
  }
  Live l{0, sane_device(ev.device), 0, stack, t, static_cast<uint8_t>(ev.api), false};
  handles_[ev.addr] = Handle{l, 1, 0, false};
  released_handles_.erase(ev.addr);
}

// Physical memory is freed by the driver once its handle is released and its last mapping gone,
// in either order (CUDA's own samples release right after mapping).
void DeviceAllocations::drop_handle_if_unused(HandleMap::iterator it) {
  Handle& h = it->second;
  if (h.refs > 0 || h.maps > 0) return;
  if (h.owned) ledger_.shrink(h.l.device, h.l.size);
  if (released_handles_.size() >= kMaxReleasedHandles) released_handles_.clear();
  released_handles_[it->first] = h;
  handles_.erase(it);
}

// The driver refused a free that was already recorded: the memory is still there.
void DeviceAllocations::on_free_failed(const Record& r, int64_t t) {
  const auto& ev = r.ev;
  const auto api = static_cast<Api>(ev.api);
  if (api == Api::kMemRelease) {
    auto h = handles_.find(ev.addr);
    if (h != handles_.end()) {
      ++h->second.refs;
      return;
    }
    auto gone = released_handles_.find(ev.addr);
    if (gone == released_handles_.end()) return;
    Handle back = gone->second;
    released_handles_.erase(gone);
    back.refs = 1;
    // Not a new allocation: the old one coming back.
    if (back.owned) ledger_.restore(back.l.device, back.l.size, t, back.l.stack);
    handles_.emplace(ev.addr, back);
    return;
  }
  auto it = freed_.find(ev.addr);
  if (it == freed_.end() || !it->second.undoable) return;  // that free removed nothing
  Live l = it->second;
  l.undoable = false;
  freed_.erase(it);
  if (l.api == static_cast<uint8_t>(Api::kExternalMemoryGetMappedBuffer)) {
    mapped_[ev.addr] = Mapping{l, l.stream, false};
    return;
  }
  if (api == Api::kMemFree || api == Api::kMemFreeAsync || api == Api::kArrayDestroy ||
      api == Api::kMipmappedArrayDestroy || api == Api::kDestroyExternalMemory) {
    if (live_.count(ev.addr)) return;
    live_[ev.addr] = l;
    ledger_.restore(l.device, l.size, t, l.stack);
    Live shown = l;
    shown.per_thread = false;  // the undo's entries name no per-thread stream
    push_alloc(shown, ev.addr, t, ev.tid, false);
  } else if (api == Api::kMemFreeHost) {
    host_[ev.addr] = l;
  } else if (api == Api::kIpcCloseMemHandle) {
    mapped_[ev.addr] = Mapping{l, 0, false};
  }
}

void DeviceAllocations::adopt_allocation(uint64_t addr) {
  auto it = live_.find(addr);
  if (it == live_.end() || it->second.torch_owned) return;
  it->second.torch_owned = true;
  trace_.adopt(Action::kAlloc, addr);
  trace_.adopt(Action::kSegmentAlloc, addr);
}

DeviceAllocations::Adopted DeviceAllocations::adopt_mappings(uint64_t addr, uint64_t size,
                                                             uint64_t small_page) {
  Adopted out;
  for (auto it = mapped_.lower_bound(addr); it != mapped_.end() && it->first < addr + size; ++it) {
    Mapping& m = it->second;
    if (!m.owned || m.l.torch_owned) continue;
    m.l.torch_owned = true;
    trace_.adopt(Action::kSegmentMap, it->first);
    out.all_small = out.any ? out.all_small && m.l.size == small_page : m.l.size == small_page;
    out.any = true;
  }
  return out;
}

bool DeviceAllocations::is_live_graph(uint64_t addr) const {
  auto l = live_.find(addr);
  return l != live_.end() && l->second.graph;
}

bool DeviceAllocations::free_by_graph(uint64_t addr, uint64_t stream, int64_t t, uint32_t tid,
                                      bool per_thread) {
  auto l = live_.find(addr);
  if (l == live_.end()) return false;
  Live gone = l->second;
  live_.erase(l);
  ledger_.shrink(gone.device, gone.size);
  push_free(gone, addr, stream, t, tid, per_thread);
  gone.undoable = false;
  freed_[addr] = gone;
  return true;
}

void DeviceAllocations::add_graph_allocation(uint64_t addr, Live l, uint32_t tid) {
  l.graph = true;
  live_[addr] = l;
  freed_.erase(addr);
  ledger_.grow(l.device, l.size, l.time_us, l.stack);
  push_alloc(l, addr, l.time_us, tid, false);
}

void DeviceAllocations::write_segments(snap::Snapshot& s) const {
  auto segment = [](int device, uint64_t addr, const Live& l, bool expandable) {
    snap::Segment g;
    g.device = device;
    g.address = addr;
    g.total_size = g.allocated_size = g.active_size = g.requested_size = l.size;
    g.stream = l.stream;
    g.is_expandable = expandable;
    g.stack = l.stack;
    g.blocks.push_back(snap::Block{addr, l.size, l.size, "active_allocated", l.stack});
    if (l.graph) g.source = snap::Source::kGraph;
    return g;
  };
  std::vector<std::pair<uint64_t, const Live*>> live(live_.size());
  std::transform(live_.begin(), live_.end(), live.begin(),
                 [](const auto& kv) { return std::make_pair(kv.first, &kv.second); });
  std::sort(live.begin(), live.end());
  for (const auto& [addr, l] : live) {
    if (!l->torch_owned) s.segments.push_back(segment(l->device, addr, *l, false));
  }
  for (const auto& [addr, m] : mapped_) {
    if (m.owned && !m.l.torch_owned) s.segments.push_back(segment(m.l.device, addr, m.l, true));
  }
}

void DeviceAllocations::write(snap::ToolSection& tool) const {
  for (const auto& [handle, h] : handles_) {
    if (!h.owned) continue;
    const Live& l = h.l;
    tool.vmm_handles.push_back(snap::VmmHandle{handle, l.size, l.device, l.stack, l.time_us});
  }
  std::sort(tool.vmm_handles.begin(), tool.vmm_handles.end(),
            [](const auto& a, const auto& b) { return a.handle < b.handle; });
  for (const auto& [addr, m] : mapped_) {
    if (m.owned) continue;
    tool.imported_mappings.push_back(
        snap::ImportedMapping{addr, m.l.size, m.l.device, m.handle, m.l.stack, m.l.time_us});
  }
  for (const auto& [addr, l] : host_) {
    tool.host_allocations.push_back(
        snap::HostAllocation{addr, l.size, api_name(l.api), l.stack, l.time_us});
  }
  std::sort(tool.host_allocations.begin(), tool.host_allocations.end(),
            [](const auto& a, const auto& b) { return a.addr < b.addr; });
  tool.anomalies = anomalies_;
}

}  // namespace cumemtrace::collect
