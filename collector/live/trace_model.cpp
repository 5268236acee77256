#include "live/trace_model.h"

#include <algorithm>

#include "live/key_value_text.h"

namespace cumemtrace::collect {

using snap::Action;
using wire::Kind;

TraceModel::TraceModel(uint64_t start_realtime_ns, uint64_t start_monotonic_ns,
                       uint64_t max_trace_events)
    : start_realtime_ns_(start_realtime_ns),
      start_monotonic_ns_(start_monotonic_ns),
      trace_(max_trace_events, ledger_),
      memory_(trace_, ledger_),
      graphs_(memory_, ledger_),
      torch_(trace_, memory_) {}

int64_t TraceModel::to_us(uint64_t mono) const {
  const int64_t delta = static_cast<int64_t>(mono - start_monotonic_ns_);
  return (static_cast<int64_t>(start_realtime_ns_) + delta) / 1000;
}

void TraceModel::measure_new_context(uint64_t driver_used_bytes) {
  // What the device already held for this process: the trace's live bytes there (the ledger's),
  // and the contexts in being that were measured before.
  const auto device = contexts_.unmeasured_device();
  if (!device) return;
  contexts_.measure(driver_used_bytes, ledger_.live(*device));
}

bool TraceModel::take_oom_request() {
  const bool r = oom_pending_;
  oom_pending_ = false;
  return r;
}

std::optional<std::string> TraceModel::take_snapshot_request() {
  std::optional<std::string> r = std::move(snapshot_pending_);
  snapshot_pending_.reset();
  return r;
}

namespace {
// The library of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp), whose
// driver calls are its own allocation attempts.
constexpr std::string_view kTorchAllocatorLibrary = "libc10_cuda.";
}  // namespace

void TraceModel::add(const Record& r) {
  const auto& ev = r.ev;
  const int64_t t = to_us(ev.time_ns);
  switch (ev.kind) {
    case Kind::kModule:
      stacks_.announce_module(ev.aux, r.text);
      return;
    case Kind::kThreadName:
      threads_[std::to_string(ev.tid)] = r.text;
      return;
    case Kind::kExit:
      exited_ = true;
      exit_status_ = ev.result;
      return;
    case Kind::kPyCode:
      stacks_.announce_code(ev.aux, r.text);
      return;
    case Kind::kMark:
      if (annotations_.on_mark(r, t)) last_time_us_ = std::max(last_time_us_, t);
      return;
    case Kind::kSnapshot:
      snapshot_pending_ = r.text;
      return;
    case Kind::kTorchInfo:
      torch_.on_info(r.text, t);
      return;
    case Kind::kRankInfo:
      on_rank_info(r.text);
      return;
    case Kind::kPoolUsage:
      last_time_us_ = std::max(last_time_us_, t);
      pools_.on_pool_usage(r, t);
      return;
    case Kind::kTorchOwners:
      if (ownership_.on_owners(r, t)) last_time_us_ = std::max(last_time_us_, t);
      return;
    case Kind::kTorchNames:
      if ((r.ev.aux & ~wire::kOwnersFirst) == wire::kNamesModules) {
        stacks_.announce_module_names(r.text, r.ev.aux & wire::kOwnersFirst);
      } else {
        ownership_.on_names(r, t);
      }
      return;
    case Kind::kContextCreated:
    case Kind::kContextDestroyed:
      last_time_us_ = std::max(last_time_us_, t);
      contexts_.on_context(r, t);
      return;
    case Kind::kDevice:
      if (ev.aux < static_cast<uint64_t>(kMaxDevices))
        device_pci_[static_cast<int>(ev.aux)] = r.text;
      return;
    default:
      break;
  }
  on_device_event(r, t);
}

// The records that are device events: counted, their thread's device noted for its marks.
void TraceModel::on_device_event(const Record& r, int64_t t) {
  const auto& ev = r.ev;
  ++events_total_;
  last_time_us_ = std::max(last_time_us_, t);
  annotations_.note_device(ev.tid, ev.device);
  const int32_t stack = stacks_.intern(r);
  switch (ev.kind) {
    case Kind::kAlloc:
    case Kind::kCreate:
    case Kind::kHostAlloc:
    case Kind::kReserve:
    case Kind::kMap:
    case Kind::kMapImported:
      memory_.on_alloc(r, t, stack);
      break;
    case Kind::kFree:
    case Kind::kRelease:
    case Kind::kHostFree:
    case Kind::kAddressFree:
    case Kind::kUnmap:
    case Kind::kUnmapImported:
      memory_.on_free(r, t, stack);
      break;
    case Kind::kFreeFailed:
      memory_.on_free_failed(r, t);
      break;
    case Kind::kRetain:
    case Kind::kImport:
      memory_.on_handle_reference(r, t, stack);
      break;
    case Kind::kOom:
      trace_.push(ev.device, {.action = Action::kOom,
                              .size = ev.size,
                              .stream = ev.stream,
                              .time_us = t,
                              .stack = stack,
                              .device_free = ev.aux,
                              .tid = ev.tid});
      // PyTorch's own cudaMalloc (or cuMemCreate) failing is not yet an OOM: PyTorch frees its
      // cache and retries, and settles it (live/torch_allocator.h). Told by the stack; without
      // one (stacks off) the driver's OOM is the snapshot's, as in a program without PyTorch.
      if (torch_.block_capture() && stacks_.passes_through(stack, kTorchAllocatorLibrary)) {
        torch_.on_own_driver_oom(sane_device(ev.device));
      } else {
        oom_pending_ = true;
      }
      break;
    case Kind::kTorchBlock:
      if (torch_.on_block(r, t, stack)) oom_pending_ = true;
      break;
    case Kind::kGraphAllocNode:
    case Kind::kGraphFreeNode:
    case Kind::kGraphInstantiate:
    case Kind::kGraphLaunch:
    case Kind::kGraphDestroy:
    case Kind::kGraphExecDestroy:
    case Kind::kGraphMemReserved:
      graphs_.on_graph(r, t, stack);
      break;
    case Kind::kAllocFailed:
    default:
      break;
  }
}

// Only torch.distributed's keys: the launcher's variables come from the hello, and a program must
// not be able to rewrite them through this record.
void TraceModel::on_rank_info(const std::string& text) {
  for_each_key_value(text, [&](const std::string& key, const std::string& value) {
    if (key.rfind("torch.distributed.", 0) == 0) rank_reported_[key] = value;
  });
}

snap::Snapshot TraceModel::build_with(const ProcessInfo& info, Symbolizer* sym) const {
  snap::Snapshot s;
  stacks_.write(s, info.exe, sym);
  trace_.write(s);
  memory_.write_segments(s);
  torch_.write_segments(s);

  s.allocator_settings = {
      {"tool", "cumemtrace"},
      {"mode", torch_.block_capture()
                   ? "CUDA driver interposition + PyTorch caching allocator (block level)"
                   : "CUDA driver interposition (segment level)"}};
  if (trace_.max_entries()) {
    s.allocator_settings["max_trace_events"] = std::to_string(trace_.max_entries());
  }
  s.allocator_settings["trace_entries_dropped"] = std::to_string(trace_.dropped());
  s.annotations = annotations_.annotations();

  snap::ToolSection tool;
  tool.pid = info.pid;
  tool.ppid = info.ppid;
  tool.exe = info.exe;
  tool.argv = info.argv;
  tool.hostname = info.hostname;
  tool.rank = info.rank;
  for (const auto& [key, value] : rank_reported_) tool.rank[key] = value;
  tool.start_time_us = static_cast<int64_t>(start_realtime_ns_ / 1000);
  tool.end_time_us = last_time_us_;
  tool.events_total = events_total_;
  tool.trace_entries_dropped = trace_.dropped();
  ledger_.write(tool.devices);
  memory_.write(tool);
  tool.pytorch = torch_.info();
  pools_.write(tool);
  tool.ownership = ownership_.walks();
  tool.tensor_names = ownership_.names();
  contexts_.write(tool);
  tool.threads = threads_;
  if (exited_) {
    tool.ended.how = "exit";
    tool.ended.code = exit_status_;
  }
  s.tool = std::move(tool);
  return s;
}

std::vector<TraceModel::DeviceTotals> TraceModel::device_totals() const {
  const auto& devices = ledger_.devices();
  std::vector<uint64_t> reserved(devices.size(), 0);
  torch_.add_reserved(reserved);
  std::vector<DeviceTotals> out(devices.size());
  for (size_t d = 0; d < devices.size(); ++d) {
    const auto& s = devices[d];
    out[d] =
        DeviceTotals{s.allocations,       s.frees,      s.bytes_allocated, s.bytes_freed, s.live,
                     s.window_peak.bytes, s.peak.bytes, reserved[d]};
  }
  return out;
}

}  // namespace cumemtrace::collect
