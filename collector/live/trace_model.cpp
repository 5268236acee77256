#include "live/trace_model.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace cumemtrace::collect {

using snap::Action;
using wire::Api;
using wire::Kind;

namespace {

const char* api_name(uint8_t api) {
  switch (static_cast<Api>(api)) {
    case Api::kDevicePrimaryCtxRetain:
      return "cuDevicePrimaryCtxRetain";
    case Api::kCtxCreate:
      return "cuCtxCreate";
    case Api::kDevicePrimaryCtxRelease:
      return "cuDevicePrimaryCtxRelease";
    case Api::kDevicePrimaryCtxReset:
      return "cuDevicePrimaryCtxReset";
    case Api::kCtxDestroy:
      return "cuCtxDestroy";
    case Api::kMemAlloc:
      return "cuMemAlloc";
    case Api::kMemAllocPitch:
      return "cuMemAllocPitch";
    case Api::kMemAllocManaged:
      return "cuMemAllocManaged";
    case Api::kMemAllocAsync:
      return "cuMemAllocAsync";
    case Api::kMemAllocFromPoolAsync:
      return "cuMemAllocFromPoolAsync";
    case Api::kMemFree:
      return "cuMemFree";
    case Api::kMemFreeAsync:
      return "cuMemFreeAsync";
    case Api::kMemCreate:
      return "cuMemCreate";
    case Api::kMemRelease:
      return "cuMemRelease";
    case Api::kMemMap:
      return "cuMemMap";
    case Api::kMemUnmap:
      return "cuMemUnmap";
    case Api::kMemAddressReserve:
      return "cuMemAddressReserve";
    case Api::kMemAddressFree:
      return "cuMemAddressFree";
    case Api::kMemHostAlloc:
      return "cuMemHostAlloc";
    case Api::kMemAllocHost:
      return "cuMemAllocHost";
    case Api::kMemFreeHost:
      return "cuMemFreeHost";
    case Api::kMemRetainAllocationHandle:
      return "cuMemRetainAllocationHandle";
    case Api::kMemImportFromShareableHandle:
      return "cuMemImportFromShareableHandle";
    case Api::kGraphAddMemAllocNode:
      return "cuGraphAddMemAllocNode";
    case Api::kGraphAddMemFreeNode:
      return "cuGraphAddMemFreeNode";
    case Api::kGraphAddNode:
      return "cuGraphAddNode";
    case Api::kGraphInstantiate:
      return "cuGraphInstantiate";
    case Api::kGraphLaunch:
      return "cuGraphLaunch";
    case Api::kGraphDestroy:
      return "cuGraphDestroy";
    case Api::kGraphExecDestroy:
      return "cuGraphExecDestroy";
    case Api::kDeviceGraphMemTrim:
      return "cuDeviceGraphMemTrim";
    case Api::kIpcOpenMemHandle:
      return "cuIpcOpenMemHandle";
    case Api::kIpcCloseMemHandle:
      return "cuIpcCloseMemHandle";
    case Api::kArrayCreate:
      return "cuArrayCreate";
    case Api::kArray3DCreate:
      return "cuArray3DCreate";
    case Api::kMipmappedArrayCreate:
      return "cuMipmappedArrayCreate";
    case Api::kArrayDestroy:
      return "cuArrayDestroy";
    case Api::kMipmappedArrayDestroy:
      return "cuMipmappedArrayDestroy";
    case Api::kImportExternalMemory:
      return "cuImportExternalMemory";
    case Api::kDestroyExternalMemory:
      return "cuDestroyExternalMemory";
    case Api::kExternalMemoryGetMappedBuffer:
      return "cuExternalMemoryGetMappedBuffer";
    case Api::kNone:
      break;
  }
  return "unknown";
}

// Device ordinals come from the target: clamp nonsense so that a corrupt value cannot make the
// model allocate a huge per-device table.
constexpr int kMaxDevices = 1024;
constexpr size_t kMaxReleasedHandles = 4096;
int sane_device(int d) {
  return d >= 0 && d < kMaxDevices ? d : 0;
}

}  // namespace

TraceModel::TraceModel(uint64_t start_realtime_ns, uint64_t start_monotonic_ns,
                       uint64_t max_trace_events)
    : start_realtime_ns_(start_realtime_ns),
      start_monotonic_ns_(start_monotonic_ns),
      max_trace_events_(max_trace_events) {}

int64_t TraceModel::to_us(uint64_t mono) const {
  const int64_t delta = static_cast<int64_t>(mono - start_monotonic_ns_);
  return (static_cast<int64_t>(start_realtime_ns_) + delta) / 1000;
}

TraceModel::StackId TraceModel::intern(const Record& r) {
  if (r.frames.empty() && r.pyframes.empty()) return -1;
  // Python code addresses become the announcement that applies now.
  std::vector<uint64_t> python = r.pyframes;
  for (size_t i = 0; i + 1 < python.size(); i += 2) {
    auto it = py_code_latest_.find(python[i]);
    python[i] = it != py_code_latest_.end() ? it->second : kNoPyCode;
  }
  std::string key(reinterpret_cast<const char*>(r.frames.data()),
                  r.frames.size() * sizeof(uint64_t));
  key.push_back('|');
  key.append(reinterpret_cast<const char*>(python.data()), python.size() * sizeof(uint64_t));
  auto [it, inserted] =
      stack_index_.try_emplace(std::move(key), static_cast<StackId>(stacks_.size()));
  if (inserted) stacks_.push_back(RawStack{r.frames, std::move(python)});
  return it->second;
}

// Native frames with the Python frames placed where the interpreter runs them: before the
// innermost evaluation-loop frame (without CPython's private structures the split of Python
// frames among several nested evaluation loops is unknown, so they go together), or after the
// native frames when the native stack did not reach the interpreter.
snap::Stack TraceModel::render(size_t id, Symbolizer& sym) const {
  const RawStack& raw = stacks_[id];
  snap::Stack native = sym.resolve_stack(raw.native);
  if (raw.python.empty()) return native;
  snap::Stack py;
  for (size_t i = 0; i + 1 < raw.python.size(); i += 2) {
    const uint64_t code = raw.python[i];
    const bool known = code < py_code_.size();
    snap::Frame f;
    f.filename = known ? py_code_[code].first : "<python>";
    f.name = known ? py_code_[code].second : "<unknown>";
    f.line = static_cast<int64_t>(raw.python[i + 1]);
    py.push_back(std::move(f));
  }
  auto at = std::find_if(native.begin(), native.end(), [](const snap::Frame& f) {
    return f.name.find("PyEval_EvalFrame") != std::string::npos;
  });
  native.insert(at, py.begin(), py.end());
  return native;
}

TraceModel::DeviceState& TraceModel::dev(int device) {
  const auto d = static_cast<size_t>(sane_device(device));
  if (devices_.size() <= d) devices_.resize(d + 1);
  return devices_[d];
}

void TraceModel::grow(int device, uint64_t size, int64_t t) {
  DeviceState& s = dev(device);
  s.live += size;
  s.allocations++;
  if (s.live > s.peak) {
    s.peak = s.live;
    s.peak_time_us = t;
  }
}

void TraceModel::shrink(int device, uint64_t size) {
  DeviceState& s = dev(device);
  s.live -= std::min(s.live, size);
  s.frees++;
}

void TraceModel::push(Action a, int device, uint64_t addr, uint64_t size, uint64_t stream,
                      int64_t t, StackId stack, uint32_t tid, uint64_t device_free,
                      bool per_thread) {
  dev(device);  // a device with events always has a trace list, even if it holds nothing now
  trace_.push_back(
      Entry{a, sane_device(device), addr, size, stream, t, stack, device_free, tid, per_thread});
  if (max_trace_events_ && trace_.size() > max_trace_events_) {
    trace_.pop_front();
    ++trace_dropped_;
  }
}

void TraceModel::anomaly(const char* kind, const Record& r, int64_t t, StackId stack) {
  anomaly(kind, r.ev.addr, static_cast<uint8_t>(r.ev.api), r.ev.tid, t, stack);
}

void TraceModel::anomaly(const char* kind, uint64_t addr, uint8_t api, uint32_t tid, int64_t t,
                         StackId stack) {
  snap::Anomaly a;
  a.kind = kind;
  a.addr = addr;
  a.api = api_name(api);
  a.stack = stack;
  a.time_us = t;
  a.tid = tid;
  anomalies_.push_back(std::move(a));
}

void TraceModel::push_free(const Live& l, uint64_t addr, uint64_t stream, int64_t t, uint32_t tid,
                           bool per_thread) {
  for (Action a : {Action::kFreeRequested, Action::kFreeCompleted, Action::kSegmentFree}) {
    push(a, l.device, addr, l.size, stream, t, -1, tid, 0, per_thread);
    trace_.back().graph = l.graph;
  }
}

void TraceModel::on_context(const Record& r, int64_t t) {
  const auto& ev = r.ev;
  last_time_us_ = std::max(last_time_us_, t);
  if (ev.kind == Kind::kContextCreated) {
    if (ev.device < 0 || ev.device >= kMaxDevices) return;
    Context c;
    c.c.device = ev.device;
    c.c.time_us = t;
    c.c.api = api_name(static_cast<uint8_t>(ev.api));
    c.c.handle = ev.aux;
    c.primary = static_cast<Api>(ev.api) == Api::kDevicePrimaryCtxRetain;
    // Two threads retaining an inactive primary context at once both see it inactive: the
    // second record names the context the first one made.
    if (c.primary && std::any_of(contexts_.begin(), contexts_.end(), [&](const Context& o) {
          return o.primary && o.c.device == c.c.device && o.c.end_time_us == 0;
        })) {
      return;
    }
    contexts_.push_back(std::move(c));
    new_context_ = ev.device;
    return;
  }
  // The newest context in being that the record names.
  const bool by_handle = static_cast<Api>(ev.api) == Api::kCtxDestroy;
  for (auto it = contexts_.rbegin(); it != contexts_.rend(); ++it) {
    snap::ContextMemory& c = it->c;
    if (c.end_time_us) continue;
    if (by_handle ? c.handle == ev.aux && !it->primary : it->primary && c.device == ev.device) {
      c.end_time_us = std::max<int64_t>(t, c.time_us + 1);
      return;
    }
  }
}

std::optional<int> TraceModel::take_new_context() {
  auto d = new_context_;
  new_context_.reset();
  return d;
}

void TraceModel::measure_new_context(uint64_t driver_used_bytes) {
  if (contexts_.empty() || contexts_.back().measured) return;
  Context& n = contexts_.back();
  // What the device already held for this process: the trace's live bytes there, and the
  // contexts in being that were measured before.
  uint64_t known = static_cast<size_t>(n.c.device) < devices_.size()
                       ? devices_[static_cast<size_t>(n.c.device)].live
                       : 0;
  for (size_t i = 0; i + 1 < contexts_.size(); ++i) {
    const auto& c = contexts_[i];
    if (c.measured && c.c.device == n.c.device && c.c.end_time_us == 0) known += c.c.bytes;
  }
  n.c.bytes = driver_used_bytes > known ? driver_used_bytes - known : 0;
  n.measured = true;
}

bool TraceModel::take_oom_request() {
  const bool r = oom_pending_;
  oom_pending_ = false;
  return r;
}

void TraceModel::add(const Record& r) {
  const auto& ev = r.ev;
  const int64_t t = to_us(ev.time_ns);
  switch (ev.kind) {
    case Kind::kModule:
      modules_.emplace_back(ev.aux, r.text);
      return;
    case Kind::kThreadName:
      threads_[std::to_string(ev.tid)] = r.text;
      return;
    case Kind::kExit:
      exited_ = true;
      exit_status_ = ev.result;
      return;
    case Kind::kPyCode: {  // "filename\0name"
      const auto nul = r.text.find('\0');
      std::string file = r.text.substr(0, nul);
      std::string name = nul == std::string::npos ? "" : r.text.substr(nul + 1);
      if (auto end = name.find('\0'); end != std::string::npos) name.resize(end);
      // A repeated announcement of the same names keeps its index, so that equal stacks stay
      // one stack; other names for a known address start a new one.
      auto [it, inserted] = py_code_latest_.try_emplace(ev.aux, py_code_.size());
      if (!inserted && py_code_[it->second].first == file && py_code_[it->second].second == name) {
        return;
      }
      it->second = py_code_.size();
      py_code_.emplace_back(std::move(file), std::move(name));
      return;
    }
    case Kind::kMark:
      on_mark(r, t);
      return;
    case Kind::kSnapshot:
      snapshot_pending_ = r.text;
      return;
    case Kind::kTorchInfo:
      on_torch_info(r.text);
      return;
    case Kind::kPoolUsage:
      on_pool_usage(r, t);
      return;
    case Kind::kTorchOwners:
      on_owners(r, t);
      return;
    case Kind::kContextCreated:
    case Kind::kContextDestroyed:
      on_context(r, t);
      return;
    case Kind::kDevice:
      if (ev.aux < static_cast<uint64_t>(kMaxDevices))
        device_pci_[static_cast<int>(ev.aux)] = r.text;
      return;
    default:
      break;
  }
  ++events_total_;
  last_time_us_ = std::max(last_time_us_, t);
  if (ev.device >= 0 && (ev.tid != last_tid_ || ev.device != last_device_)) {
    last_tid_ = ev.tid;
    last_device_ = ev.device;
    thread_device_[ev.tid] = sane_device(ev.device);
  }
  const StackId stack = intern(r);
  switch (ev.kind) {
    case Kind::kAlloc:
    case Kind::kCreate:
    case Kind::kHostAlloc:
    case Kind::kReserve:
    case Kind::kMap:
    case Kind::kMapImported:
      on_alloc(r, t, stack);
      break;
    case Kind::kFree:
    case Kind::kRelease:
    case Kind::kHostFree:
    case Kind::kAddressFree:
    case Kind::kUnmap:
    case Kind::kUnmapImported:
      on_free(r, t, stack);
      break;
    case Kind::kFreeFailed:
      on_free_failed(r, t);
      break;
    case Kind::kRetain:
    case Kind::kImport:
      on_handle_reference(r, t, stack);
      break;
    case Kind::kOom:
      push(Action::kOom, ev.device, 0, ev.size, ev.stream, t, stack, ev.tid, ev.aux);
      oom_pending_ = true;
      break;
    case Kind::kTorchBlock:
      on_torch(r, t, stack);
      break;
    case Kind::kGraphAllocNode:
    case Kind::kGraphFreeNode:
    case Kind::kGraphInstantiate:
    case Kind::kGraphLaunch:
    case Kind::kGraphDestroy:
    case Kind::kGraphExecDestroy:
    case Kind::kGraphMemReserved:
      on_graph(r, t, stack);
      break;
    case Kind::kAllocFailed:
    default:
      break;
  }
}

std::optional<std::string> TraceModel::take_snapshot_request() {
  std::optional<std::string> r = std::move(snapshot_pending_);
  snapshot_pending_.reset();
  return r;
}

void TraceModel::on_mark(const Record& r, int64_t t) {
  const auto stage = static_cast<wire::MarkStage>(r.ev.aux & 0xff);
  const uint64_t range = r.ev.aux >> 8;
  snap::Annotation a;
  a.time_us = t;
  const auto d = thread_device_.find(r.ev.tid);
  a.device = d != thread_device_.end() ? d->second : 0;
  switch (stage) {
    case wire::MarkStage::kMark:
      a.stage = "MARK";
      a.name = r.text;
      break;
    case wire::MarkStage::kStart:
      a.stage = "START";
      a.name = r.text;
      if (range) {
        ranges_[range] = r.text;
      } else {
        pushed_[r.ev.tid].push_back(r.text);
      }
      break;
    case wire::MarkStage::kEnd: {
      a.stage = "END";
      if (range) {
        auto it = ranges_.find(range);
        if (it == ranges_.end()) return;
        a.name = std::move(it->second);
        ranges_.erase(it);
      } else {
        auto it = pushed_.find(r.ev.tid);
        if (it == pushed_.end() || it->second.empty()) return;
        a.name = std::move(it->second.back());
        it->second.pop_back();
      }
      break;
    }
    default:
      return;
  }
  last_time_us_ = std::max(last_time_us_, t);
  annotations_.push_back(std::move(a));
}

void TraceModel::on_alloc(const Record& r, int64_t t, StackId stack) {
  const auto& ev = r.ev;
  const bool per_thread = ev.flags & wire::kFlagPerThreadStream;
  Live l{ev.size, sane_device(ev.device),       ev.stream, stack,
         t,       static_cast<uint8_t>(ev.api), per_thread};
  switch (ev.kind) {
    case Kind::kAlloc:
      live_[ev.addr] = l;
      freed_.erase(ev.addr);
      grow(l.device, l.size, t);
      push(Action::kSegmentAlloc, l.device, ev.addr, l.size, l.stream, t, stack, ev.tid, 0,
           per_thread);
      push(Action::kAlloc, l.device, ev.addr, l.size, l.stream, t, stack, ev.tid, 0, per_thread);
      if (ev.api == wire::Api::kMemAllocAsync || ev.api == wire::Api::kMemAllocFromPoolAsync) {
        trace_.back().async_pool = true;  // both entries: the unit is made by segment_alloc
        if (trace_.size() > 1) trace_[trace_.size() - 2].async_pool = true;
      }
      break;
    case Kind::kCreate:
      handles_[ev.addr] = Handle{l, 1, 0, true};
      released_handles_.erase(ev.addr);
      grow(l.device, l.size, t);
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
    case Kind::kMap: {
      auto h = handles_.find(ev.aux);
      if (h == handles_.end()) {
        // Created before we could see it: mapped here, owned by nobody we know of.
        h = handles_.emplace(ev.aux, Handle{l, 1, 0, false}).first;
      }
      ++h->second.maps;
      if (h->second.owned) {
        l.device = h->second.l.device;
        mapped_[ev.addr] = Mapping{l, ev.aux, true};
        push(Action::kSegmentMap, l.device, ev.addr, l.size, 0, t, stack, ev.tid);
      } else {
        // Another process's memory (NCCL peers): visible here, not this process's segment.
        mapped_[ev.addr] = Mapping{l, ev.aux, false};
      }
      break;
    }
    default:
      break;
  }
}

void TraceModel::on_free(const Record& r, int64_t t, StackId stack) {
  const auto& ev = r.ev;
  switch (ev.kind) {
    case Kind::kFree: {
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
      shrink(l.device, l.size);
      const bool pt = ev.flags & wire::kFlagPerThreadStream;
      if (!l.torch_owned) push_free(l, ev.addr, ev.stream, t, ev.tid, pt);
      l.torch_owned = false;
      l.undoable = true;
      freed_[ev.addr] = l;
      break;
    }
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
    case Kind::kUnmap: {
      // One unmap may cover several mappings (PyTorch unmaps a run of expandable-segment pages).
      auto it = mapped_.lower_bound(ev.addr);
      if (it == mapped_.end() || it->first >= ev.addr + ev.size) {
        anomaly("unmap_unknown_range", r, t, stack);
        return;
      }
      while (it != mapped_.end() && it->first < ev.addr + ev.size) {
        const Mapping& m = it->second;
        if (m.owned && !m.l.torch_owned)
          push(Action::kSegmentUnmap, m.l.device, it->first, m.l.size, 0, t, -1, ev.tid);
        auto h = handles_.find(m.handle);
        if (h != handles_.end() && h->second.maps > 0) {
          --h->second.maps;
          drop_handle_if_unused(h);
        }
        it = mapped_.erase(it);
      }
      break;
    }
    default:
      break;
  }
}

// cuMemRetainAllocationHandle adds a reference to a handle we know (or, for memory mapped before we
// saw its handle, to one we learn of now); an import is a handle to memory owned elsewhere.
void TraceModel::on_handle_reference(const Record& r, int64_t t, StackId stack) {
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
void TraceModel::drop_handle_if_unused(HandleMap::iterator it) {
  Handle& h = it->second;
  if (h.refs > 0 || h.maps > 0) return;
  if (h.owned) {
    shrink(h.l.device, h.l.size);
  }
  // A failed release is reported right after it; older entries need not be kept for ever.
  if (released_handles_.size() >= kMaxReleasedHandles) released_handles_.clear();
  released_handles_[it->first] = h;
  handles_.erase(it);
}

// The driver refused a free that was already recorded: the memory is still there.
void TraceModel::on_free_failed(const Record& r, int64_t t) {
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
    if (back.owned) {  // not a new allocation: the old one coming back
      grow(back.l.device, back.l.size, t);
      dev(back.l.device).allocations--;
      dev(back.l.device).frees--;
    }
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
    grow(l.device, l.size, t);
    dev(l.device).allocations--;  // not a new allocation, the old one coming back
    dev(l.device).frees--;
    push(Action::kSegmentAlloc, l.device, ev.addr, l.size, l.stream, t, l.stack, ev.tid);
    trace_.back().graph = l.graph;
    push(Action::kAlloc, l.device, ev.addr, l.size, l.stream, t, l.stack, ev.tid);
    trace_.back().graph = l.graph;
  } else if (api == Api::kMemFreeHost) {
    host_[ev.addr] = l;
  } else if (api == Api::kIpcCloseMemHandle) {
    mapped_[ev.addr] = Mapping{l, 0, false};
  }
}

// --- CUDA graph memory -----------------------------------------------------------------------

void TraceModel::on_graph(const Record& r, int64_t t, StackId stack) {
  const auto& ev = r.ev;
  switch (ev.kind) {
    case Kind::kGraphAllocNode:
    case Kind::kGraphFreeNode: {
      const bool alloc = ev.kind == Kind::kGraphAllocNode;
      graphs_[ev.aux].push_back(GraphNode{alloc, ev.addr, alloc ? ev.size : 0,
                                          sane_device(ev.device), stack,
                                          static_cast<uint8_t>(ev.api)});
      break;
    }
    case Kind::kGraphInstantiate: {
      auto g = graphs_.find(ev.aux);
      if (g == graphs_.end() || g->second.empty()) {
        graph_execs_.erase(ev.addr);  // no memory nodes; a reused handle forgets its old graph
        break;
      }
      const bool auto_free = ev.size & 1;  // CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH
      graph_execs_[ev.addr] = GraphExec{g->second, auto_free};
      break;
    }
    case Kind::kGraphLaunch:
      launch_graph(r, t);
      break;
    case Kind::kGraphDestroy:
      graphs_.erase(ev.addr);
      break;
    case Kind::kGraphExecDestroy:
      graph_execs_.erase(ev.addr);
      break;
    case Kind::kGraphMemReserved: {
      DeviceState& d = dev(ev.device);
      d.graph_reserved = ev.size;
      d.graph_reserved_peak = std::max(d.graph_reserved_peak, ev.size);
      break;
    }
    default:
      break;
  }
}

void TraceModel::launch_graph(const Record& r, int64_t t) {
  const auto& ev = r.ev;
  auto it = graph_execs_.find(ev.addr);
  if (it == graph_execs_.end()) return;  // a graph without memory nodes
  const GraphExec& exec = it->second;
  const bool pt = ev.flags & wire::kFlagPerThreadStream;
  auto free_live = [&](uint64_t addr) {
    auto l = live_.find(addr);
    if (l == live_.end()) return false;
    Live gone = l->second;
    live_.erase(l);
    shrink(gone.device, gone.size);
    push_free(gone, addr, ev.stream, t, ev.tid, pt);
    gone.undoable = false;
    freed_[addr] = gone;
    return true;
  };
  if (exec.auto_free) {  // the driver frees what the previous launch left, before relaunching
    for (const GraphNode& n : exec.nodes) {
      auto l = live_.find(n.addr);
      if (n.alloc && l != live_.end() && l->second.graph) free_live(n.addr);
    }
  }
  for (const GraphNode& n : exec.nodes) {
    if (!n.alloc) {
      if (!free_live(n.addr)) {
        const bool twice = freed_.count(n.addr) != 0;
        anomaly(twice ? "double_free" : "free_unknown_pointer", n.addr, n.api, ev.tid, t, n.stack);
      }
      continue;
    }
    if (live_.count(n.addr)) continue;  // still live: the driver refuses such a launch
    Live l{n.size, n.device, ev.stream, n.stack, t, n.api, pt};
    l.graph = true;
    live_[n.addr] = l;
    freed_.erase(n.addr);
    grow(l.device, l.size, t);
    for (Action a : {Action::kSegmentAlloc, Action::kAlloc}) {
      push(a, l.device, n.addr, l.size, l.stream, t, n.stack, ev.tid, 0, pt);
      trace_.back().graph = true;
    }
  }
}

// --- PyTorch's caching allocator ------------------------------------------------------------

namespace {

constexpr uint64_t kTorchMinBlock = 512;         // PyTorch's kMinBlockSize
constexpr uint64_t kTorchSmallSize = 1 << 20;    // kSmallSize: larger requests use the large pool
constexpr uint64_t kTorchSmallBuffer = 2 << 20;  // kSmallBuffer: small-pool segments and pages
// How far back the driver entries of memory PyTorch adopts are looked for: they were recorded
// just before PyTorch's own entry, at most a few other threads' events apart.
constexpr size_t kAdoptWindow = 4096;

uint64_t torch_round(uint64_t size) {
  return size < kTorchMinBlock ? kTorchMinBlock
                               : (size + kTorchMinBlock - 1) / kTorchMinBlock * kTorchMinBlock;
}

}  // namespace

void TraceModel::unpush_driver(Action a, uint64_t addr) {
  const size_t stop = trace_.size() > kAdoptWindow ? trace_.size() - kAdoptWindow : 0;
  for (size_t i = trace_.size(); i-- > stop;) {
    const Entry& e = trace_[i];
    if (!e.pytorch && e.action == a && e.addr == addr) {
      trace_.erase(trace_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

void TraceModel::on_torch(const Record& r, int64_t t, StackId stack) {
  const auto& ev = r.ev;
  const int device = sane_device(ev.device);
  const uint64_t addr = ev.addr, size = ev.size;
  auto entry = [&](Action a, uint64_t entry_addr, uint64_t device_free = 0) {
    push(a, device, entry_addr, size, ev.stream, t, stack, ev.tid, device_free);
    trace_.back().pytorch = true;
  };
  switch (static_cast<wire::TorchAction>(ev.aux)) {
    case wire::TorchAction::kAlloc:
      torch_blocks_[addr] = TorchBlock{size, ev.stream, stack, false};
      entry(Action::kAlloc, addr);
      break;
    case wire::TorchAction::kFreeRequested:
      if (auto it = torch_blocks_.find(addr); it != torch_blocks_.end()) {
        it->second.pending_free = true;
        it->second.free_stack = stack;
      }
      entry(Action::kFreeRequested, addr);
      break;
    case wire::TorchAction::kFreeCompleted:
      // Recorded without a walk: PyTorch's context for it is its request's, or the allocation's
      // when the request is unknown (requested before tracing started).
      if (auto it = torch_blocks_.find(addr); it != torch_blocks_.end()) {
        if (stack < 0) stack = it->second.pending_free ? it->second.free_stack : it->second.stack;
        torch_blocks_.erase(it);
      }
      entry(Action::kFreeCompleted, addr);
      break;
    case wire::TorchAction::kSegmentAlloc: {
      if (auto it = live_.find(addr); it != live_.end() && !it->second.torch_owned) {
        it->second.torch_owned = true;
        unpush_driver(Action::kAlloc, addr);
        unpush_driver(Action::kSegmentAlloc, addr);
      }
      torch_segments_[addr] =
          TorchSegment{size, device, ev.stream, stack, size == kTorchSmallBuffer};
      entry(Action::kSegmentAlloc, addr);
      break;
    }
    case wire::TorchAction::kSegmentFree:
      torch_segments_.erase(addr);
      entry(Action::kSegmentFree, addr);
      break;
    case wire::TorchAction::kSegmentMap: {
      // The pages PyTorch just mapped (one cuMemMap each): small-pool pages are 2 MiB.
      bool small = size == kTorchSmallBuffer, any = false;
      for (auto it = mapped_.lower_bound(addr); it != mapped_.end() && it->first < addr + size;
           ++it) {
        Mapping& m = it->second;
        if (!m.owned || m.l.torch_owned) continue;
        m.l.torch_owned = true;
        unpush_driver(Action::kSegmentMap, it->first);
        small = any ? small && m.l.size == kTorchSmallBuffer : m.l.size == kTorchSmallBuffer;
        any = true;
      }
      torch_mapped_[addr] = TorchSegment{size, device, ev.stream, stack, small};
      entry(Action::kSegmentMap, addr);
      break;
    }
    case wire::TorchAction::kSegmentUnmap: {
      // Subtract [addr, addr + size) from the mapped pieces (an unmap may cut a piece).
      const uint64_t end = addr + size;
      auto it = torch_mapped_.upper_bound(addr);
      if (it != torch_mapped_.begin()) --it;
      while (it != torch_mapped_.end() && it->first < end) {
        const uint64_t b = it->first, e = b + it->second.size;
        if (e <= addr) {
          ++it;
          continue;
        }
        TorchSegment piece = it->second;
        it = torch_mapped_.erase(it);
        if (b < addr) {
          TorchSegment head = piece;
          head.size = addr - b;
          torch_mapped_[b] = head;
        }
        if (e > end) {
          TorchSegment tail = piece;
          tail.size = e - end;
          it = torch_mapped_.emplace(end, tail).first;
          break;
        }
      }
      entry(Action::kSegmentUnmap, addr);
      break;
    }
    case wire::TorchAction::kOom:  // addr is the device's free bytes, size the request
      entry(Action::kOom, 0, addr);
      oom_pending_ = true;
      break;
    case wire::TorchAction::kSnapshot:
    default:
      break;
  }
}

// A pool sample is kept when its reserved bytes differ from the pool's previous sample; the
// latest one of each pool is added at build time (see build()).
void TraceModel::on_pool_usage(const Record& r, int64_t t) {
  const auto& ev = r.ev;
  snap::PoolMemorySample m{t, sane_device(ev.device), ev.addr, ev.size, ev.aux};
  last_time_us_ = std::max(last_time_us_, t);
  auto [it, first] = pool_latest_.try_emplace(ev.addr, m);
  const bool changed = first || it->second.reserved_bytes != m.reserved_bytes;
  it->second = m;
  if (changed) {
    pool_samples_.push_back(m);
    pool_kept_[ev.addr] = t;
  }
}

// A walk's first record starts a walk of its role at its time; the records after it append.
// The ring reader checked the payload (whole pairs).
void TraceModel::on_owners(const Record& r, int64_t t) {
  const uint64_t role = r.ev.aux & ~wire::kOwnersFirst;
  if (role < static_cast<uint64_t>(snap::OwnerRole::kParameter) ||
      role > static_cast<uint64_t>(snap::OwnerRole::kOptimizerState)) {
    throw CorruptRing(fmt::format("record {} ownership walk of role {}", r.ticket, r.ev.aux));
  }
  if (r.ev.aux & wire::kOwnersFirst) {
    snap::OwnerWalk w;
    w.time_us = t;
    w.role = static_cast<snap::OwnerRole>(role);
    open_walk_[role] = ownership_.size();
    ownership_.push_back(std::move(w));
    last_time_us_ = std::max(last_time_us_, t);
  } else if (open_walk_[role] == kNoWalk) {
    return;  // the walk's first record was dropped (counted in events_dropped)
  }
  auto& tensors = ownership_[open_walk_[role]].tensors;
  for (size_t off = 0; off + 16 <= r.text.size(); off += 16) {
    uint64_t pair[2];
    std::memcpy(pair, r.text.data() + off, sizeof pair);
    tensors.emplace_back(pair[0], pair[1]);
  }
}

void TraceModel::on_torch_info(const std::string& text) {
  snap::PytorchInfo info;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    const auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "version") info.version = value;
    if (key == "backend") info.backend = value;
    if (key == "capture") info.capture = value;
    if (key == "why") info.why = value;
    if (key == "expandable_segments") info.expandable_segments = value == "1";
  }
  if (info.capture != "blocks" && info.capture != "driver") info.capture = "off";
  pytorch_ = std::move(info);
}

// PyTorch's segments with their blocks, as torch.cuda.memory_snapshot() lays them out.
void TraceModel::torch_segments(snap::Snapshot& s) const {
  auto add = [&](uint64_t addr, const TorchSegment& g, uint64_t total, bool expandable) {
    snap::Segment seg;
    seg.source = snap::Source::kPytorch;
    seg.device = g.device;
    seg.address = addr;
    seg.total_size = total;
    seg.stream = g.stream;
    seg.segment_type = g.small ? "small" : "large";
    seg.is_expandable = expandable;
    seg.stack = g.stack;
    const uint64_t seg_end = addr + total;
    const bool split_any = g.small || expandable || (pytorch_ && pytorch_->expandable_segments);
    uint64_t cursor = addr;
    auto inactive = [&](uint64_t from, uint64_t to) {
      if (to > from) seg.blocks.push_back(snap::Block{from, to - from, 0, "inactive", -1});
    };
    for (auto it = torch_blocks_.lower_bound(addr);
         it != torch_blocks_.end() && it->first < seg_end; ++it) {
      const uint64_t a = it->first;
      if (a < cursor) continue;  // overlaps the previous block: inconsistent input, skip it
      inactive(cursor, a);
      const auto next_it = std::next(it);
      const uint64_t next =
          next_it != torch_blocks_.end() && next_it->first < seg_end ? next_it->first : seg_end;
      uint64_t end = std::min(a + torch_round(it->second.requested), next);
      // PyTorch's should_split(): the large pool of the default allocator splits a block only
      // when more than 1 MiB remains, so a smaller remainder stays in the block; the small pool,
      // and every pool under expandable_segments, splits off any remainder (>= 512 B).
      if (!split_any && next - end <= kTorchSmallSize) end = next;
      const TorchBlock& k = it->second;
      seg.blocks.push_back(snap::Block{a, end - a, k.requested,
                                       k.pending_free ? "active_pending_free" : "active_allocated",
                                       k.stack});
      seg.active_size += end - a;
      if (!k.pending_free) {
        seg.allocated_size += end - a;
        seg.requested_size += k.requested;
      }
      cursor = end;
    }
    inactive(cursor, seg_end);
    s.segments.push_back(std::move(seg));
  };
  for (const auto& [addr, g] : torch_segments_) add(addr, g, g.size, false);
  // Maximal runs of mapped pieces are the segments of expandable segments.
  for (auto it = torch_mapped_.begin(); it != torch_mapped_.end();) {
    const uint64_t start = it->first;
    const TorchSegment& first = it->second;
    uint64_t end = start + first.size;
    for (++it; it != torch_mapped_.end() && it->first == end && it->second.device == first.device &&
               it->second.small == first.small;
         ++it) {
      end += it->second.size;
    }
    add(start, first, end - start, true);
  }
}

snap::Snapshot TraceModel::build(const ProcessInfo& info, Symbolizer& sym) const {
  snap::Snapshot s;
  sym.set_main_exe(info.exe);
  for (const auto& [base, path] : modules_) sym.add_module(base, path);
  s.stacks.reserve(stacks_.size());
  for (size_t i = 0; i < stacks_.size(); ++i) s.stacks.push_back(render(i, sym));

  s.device_traces.resize(std::max<size_t>(devices_.size(), 1));
  for (const Entry& e : trace_) {
    snap::TraceEntry te;
    te.action = e.action;
    te.addr = e.addr;
    te.size = e.size;
    te.stream = e.stream;
    te.time_us = e.time_us;
    te.stack = e.stack;
    te.device_free = e.device_free;
    te.tid = e.tid;
    te.stream_per_thread = e.per_thread;
    te.async_pool = e.async_pool;
    te.source = e.pytorch ? snap::Source::kPytorch
                : e.graph ? snap::Source::kGraph
                          : snap::Source::kDriver;
    s.device_traces[static_cast<size_t>(e.device)].push_back(te);
  }

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
  torch_segments(s);

  const bool blocks = pytorch_ && pytorch_->capture == "blocks";
  s.allocator_settings = {
      {"tool", "cumemtrace"},
      {"mode", blocks ? "CUDA driver interposition + PyTorch caching allocator (block level)"
                      : "CUDA driver interposition (segment level)"}};
  if (max_trace_events_) {
    s.allocator_settings["max_trace_events"] = std::to_string(max_trace_events_);
  }
  s.allocator_settings["trace_entries_dropped"] = std::to_string(trace_dropped_);
  s.annotations = annotations_;

  snap::ToolSection tool;
  tool.pid = info.pid;
  tool.ppid = info.ppid;
  tool.exe = info.exe;
  tool.argv = info.argv;
  tool.hostname = info.hostname;
  tool.rank = info.rank;
  tool.start_time_us = static_cast<int64_t>(start_realtime_ns_ / 1000);
  tool.end_time_us = last_time_us_;
  tool.events_total = events_total_;
  tool.trace_entries_dropped = trace_dropped_;
  for (size_t d = 0; d < devices_.size(); ++d) {
    const auto& ds = devices_[d];
    tool.devices.push_back(snap::DeviceSummary{static_cast<int>(d), ds.peak, ds.peak_time_us,
                                               ds.live, ds.allocations, ds.frees, ds.graph_reserved,
                                               ds.graph_reserved_peak});
  }
  for (const auto& [handle, h] : handles_) {
    if (!h.owned) continue;
    const Live& l = h.l;
    tool.vmm_handles.push_back(snap::VmmHandle{handle, l.size, l.device, l.stack, l.time_us});
  }
  for (const auto& [addr, m] : mapped_) {
    if (m.owned) continue;
    tool.imported_mappings.push_back(
        snap::ImportedMapping{addr, m.l.size, m.l.device, m.handle, m.l.stack, m.l.time_us});
  }
  std::sort(tool.vmm_handles.begin(), tool.vmm_handles.end(),
            [](const auto& a, const auto& b) { return a.handle < b.handle; });
  for (const auto& [addr, l] : host_) {
    tool.host_allocations.push_back(
        snap::HostAllocation{addr, l.size, api_name(l.api), l.stack, l.time_us});
  }
  std::sort(tool.host_allocations.begin(), tool.host_allocations.end(),
            [](const auto& a, const auto& b) { return a.addr < b.addr; });
  tool.anomalies = anomalies_;
  tool.pytorch = pytorch_;
  tool.pool_memory = pool_samples_;
  tool.ownership = ownership_;
  // Each pool's latest sample (the one at exit, at the end) even when its reserved bytes were
  // unchanged, so that the pool's state at the snapshot's moment is in the file.
  for (const auto& [pool, m] : pool_latest_) {
    const auto kept = pool_kept_.find(pool);
    if (kept == pool_kept_.end() || kept->second != m.time_us) tool.pool_memory.push_back(m);
  }
  std::stable_sort(tool.pool_memory.begin(), tool.pool_memory.end(),
                   [](const auto& a, const auto& b) { return a.time_us < b.time_us; });
  for (const auto& c : contexts_)
    if (c.measured) tool.contexts.push_back(c.c);
  tool.threads = threads_;
  if (exited_) {
    tool.ended.how = "exit";
    tool.ended.code = exit_status_;
  }
  s.tool = std::move(tool);
  return s;
}

}  // namespace cumemtrace::collect
