// The event model: what each ring record does to the live state, the counters and the trace.
#include <algorithm>
#include <catch2/catch.hpp>

#include "live/trace_model.h"
#include "record_builder.h"

using namespace cumemtrace;
using snap::Action;
using wire::Api;
using wire::Kind;

namespace {

struct Feeder {
  collect::TraceModel model{1'700'000'000'000'000'000ull, 1'000'000'000ull, 0};
  collect::Symbolizer sym;
  uint64_t clock = 1'000'000'000ull;

  void add(Kind k, Api api, uint64_t addr, uint64_t size, int device = 0, uint64_t aux = 0,
           std::vector<uint64_t> frames = {}, std::vector<uint64_t> pyframes = {}) {
    collect::Record r = test::record(k, api, addr, size, device, aux, /*tid=*/42);
    r.ev.time_ns = clock += 1000;
    r.frames = std::move(frames);
    r.pyframes = std::move(pyframes);
    model.add(r);
  }
  void py_code(uint64_t code, const std::string& file, const std::string& name) {
    collect::Record r;
    r.ev.kind = Kind::kPyCode;
    r.ev.aux = code;
    r.ev.time_ns = clock += 1000;
    r.text = file + '\0' + name;
    model.add(r);
  }
  snap::Snapshot build() {
    return model.build(collect::ProcessInfo{7, 1, "/bin/app", {}, {}, "h"}, sym);
  }
};

std::vector<Action> actions(const snap::Snapshot& s, size_t device) {
  std::vector<Action> out;
  for (const auto& e : s.device_traces.at(device)) out.push_back(e.action);
  return out;
}

}  // namespace

TEST_CASE("allocations and frees map to PyTorch actions with exact live and peak bytes") {
  Feeder f;
  f.add(Kind::kAlloc, Api::kMemAlloc, 0x1000, 100, 0, 0, {0x10, 0x20});
  f.add(Kind::kAlloc, Api::kMemAlloc, 0x2000, 200, 0, 0, {0x10, 0x20});
  f.add(Kind::kFree, Api::kMemFree, 0x1000, 0);
  f.add(Kind::kAlloc, Api::kMemAllocAsync, 0x9000, 50, 1);
  auto s = f.build();
  REQUIRE(actions(s, 0) == std::vector<Action>{Action::kSegmentAlloc, Action::kAlloc,
                                               Action::kSegmentAlloc, Action::kAlloc,
                                               Action::kFreeRequested, Action::kFreeCompleted,
                                               Action::kSegmentFree});
  REQUIRE(s.device_traces[0][4].size == 100);  // the free carries the allocation's size
  REQUIRE(s.stacks.size() == 1);               // identical stacks are interned once
  REQUIRE(s.device_traces[0][1].stack == s.device_traces[0][3].stack);
  REQUIRE(s.segments.size() == 2);
  REQUIRE(s.segments[0].address == 0x2000);
  REQUIRE(s.segments[0].blocks.size() == 1);
  REQUIRE(s.segments[0].blocks[0].size == 200);
  REQUIRE(s.segments[1].device == 1);
  const auto& d0 = s.tool->devices[0];
  REQUIRE(d0.peak_bytes == 300);
  REQUIRE(d0.live_bytes == 200);
  REQUIRE(d0.allocations == 2);
  REQUIRE(d0.frees == 1);
  REQUIRE(s.tool->devices[1].live_bytes == 50);
  REQUIRE(s.tool->events_total == 4);
  REQUIRE(s.device_traces[0][0].time_us == 1'700'000'000'000'001);
}

TEST_CASE("double free and unknown free are anomalies; a failed free is undone") {
  Feeder f;
  f.add(Kind::kAlloc, Api::kMemAlloc, 0x1000, 100);
  f.add(Kind::kFree, Api::kMemFree, 0x1000, 0);
  f.add(Kind::kFree, Api::kMemFree, 0x1000, 0);
  f.add(Kind::kFree, Api::kMemFree, 0xdead, 0);
  f.add(Kind::kAlloc, Api::kMemAlloc, 0x3000, 300);
  f.add(Kind::kFree, Api::kMemFree, 0x3000, 0);
  f.add(Kind::kFreeFailed, Api::kMemFree, 0x3000, 0);
  auto s = f.build();
  REQUIRE(s.tool->anomalies.size() == 2);
  REQUIRE(s.tool->anomalies[0].kind == "double_free");
  REQUIRE(s.tool->anomalies[1].kind == "free_unknown_pointer");
  REQUIRE(s.tool->anomalies[1].addr == 0xdead);
  REQUIRE(s.segments.size() == 1);
  REQUIRE(s.segments[0].address == 0x3000);
  REQUIRE(s.tool->devices[0].live_bytes == 300);
  REQUIRE(s.tool->devices[0].allocations == 2);
  REQUIRE(s.tool->devices[0].frees == 1);
}

TEST_CASE("a refused double free does not resurrect the allocation") {
  Feeder f;
  f.add(Kind::kAlloc, Api::kMemAlloc, 0x1000, 100);
  f.add(Kind::kFree, Api::kMemFree, 0x1000, 0);
  f.add(Kind::kFree, Api::kMemFree, 0x1000, 0);        // double free, recorded before the call
  f.add(Kind::kFreeFailed, Api::kMemFree, 0x1000, 0);  // the driver refuses it
  auto s = f.build();
  REQUIRE(s.segments.empty());
  REQUIRE(s.tool->devices[0].live_bytes == 0);
  REQUIRE(s.tool->anomalies.size() == 1);
}

TEST_CASE("VMM: handles hold device bytes, mappings are segment_map/unmap") {
  Feeder f;
  f.add(Kind::kReserve, Api::kMemAddressReserve, 0x100000, 8 << 20);
  f.add(Kind::kCreate, Api::kMemCreate, /*handle*/ 77, 2 << 20, 1);
  f.add(Kind::kCreate, Api::kMemCreate, 78, 2 << 20, 1);
  f.add(Kind::kMap, Api::kMemMap, 0x100000, 2 << 20, 0, /*handle*/ 77);
  f.add(Kind::kMap, Api::kMemMap, 0x300000, 2 << 20, 0, 78);
  // One unmap covering both mappings closes both.
  f.add(Kind::kUnmap, Api::kMemUnmap, 0x100000, 4 << 20);
  f.add(Kind::kRelease, Api::kMemRelease, 77, 0);
  f.add(Kind::kRelease, Api::kMemRelease, 99, 0);
  auto s = f.build();
  REQUIRE(actions(s, 1) == std::vector<Action>{Action::kSegmentMap, Action::kSegmentMap,
                                               Action::kSegmentUnmap, Action::kSegmentUnmap});
  REQUIRE(s.segments.empty());
  REQUIRE(s.tool->vmm_handles.size() == 1);
  REQUIRE(s.tool->vmm_handles[0].handle == 78);
  REQUIRE(s.tool->devices[1].live_bytes == 2u << 20);
  REQUIRE(s.tool->devices[1].peak_bytes == 4u << 20);
  REQUIRE(s.tool->anomalies.size() == 1);
  REQUIRE(s.tool->anomalies[0].kind == "release_unknown_handle");
}

TEST_CASE("pinned host memory is reported apart from device memory") {
  Feeder f;
  f.add(Kind::kHostAlloc, Api::kMemHostAlloc, 0x5000, 1 << 20, -1);
  f.add(Kind::kHostAlloc, Api::kMemAllocHost, 0x6000, 64 << 10, -1);
  f.add(Kind::kHostFree, Api::kMemFreeHost, 0x5000, 0, -1);
  auto s = f.build();
  REQUIRE(s.segments.empty());
  REQUIRE(s.tool->host_allocations.size() == 1);
  REQUIRE(s.tool->host_allocations[0].size == 64u << 10);
  REQUIRE(s.tool->host_allocations[0].api == "cuMemAllocHost");
}

TEST_CASE("OOM becomes an oom entry and asks for a snapshot at once") {
  Feeder f;
  f.add(Kind::kOom, Api::kMemAlloc, 0, 1 << 30, 0, /*free*/ 12345);
  REQUIRE(f.model.take_oom_request());
  REQUIRE_FALSE(f.model.take_oom_request());
  auto s = f.build();
  REQUIRE(s.device_traces[0].size() == 1);
  REQUIRE(s.device_traces[0][0].action == Action::kOom);
  REQUIRE(s.device_traces[0][0].device_free == 12345);
  REQUIRE(s.device_traces[0][0].size == 1u << 30);
}

TEST_CASE("a bounded trace keeps the newest entries and the complete live state") {
  collect::TraceModel model(0, 0, 4);
  collect::Symbolizer sym;
  for (uint64_t i = 0; i < 10; ++i) {
    collect::Record r;
    r.ev.kind = Kind::kAlloc;
    r.ev.addr = 0x1000 * (i + 1);
    r.ev.size = 10;
    model.add(r);
  }
  auto s = model.build(collect::ProcessInfo{}, sym);
  REQUIRE(s.device_traces[0].size() == 4);
  REQUIRE(s.device_traces[0].back().addr == 0xa000);
  REQUIRE(s.segments.size() == 10);
  REQUIRE(s.allocator_settings.at("trace_entries_dropped") == "16");
}

TEST_CASE("exit status, thread names and out-of-range devices") {
  Feeder f;
  collect::Record name;
  name.ev.kind = Kind::kThreadName;
  name.ev.tid = 42;
  name.text = "worker";
  f.model.add(name);
  f.add(Kind::kAlloc, Api::kMemAlloc, 0x1000, 8, 30000);  // corrupt device: clamped to 0
  collect::Record exit_rec;
  exit_rec.ev.kind = Kind::kExit;
  exit_rec.ev.result = 3;
  f.model.add(exit_rec);
  auto s = f.build();
  REQUIRE(s.tool->threads.at("42") == "worker");
  REQUIRE(s.tool->ended.how == "exit");
  REQUIRE(s.tool->ended.code == 3);
  REQUIRE(s.device_traces.size() == 1);
  REQUIRE(s.tool->events_total == 1);
}

TEST_CASE("a re-announced Python code address names only the records after it") {
  Feeder f;
  f.py_code(0xc0de, "a.py", "first");
  f.add(Kind::kAlloc, Api::kMemAlloc, 0x1000, 100, 0, 0, {}, {0xc0de, 7});
  f.py_code(0xc0de, "a.py", "first");  // the same names again: the same stack
  f.add(Kind::kAlloc, Api::kMemAlloc, 0x2000, 100, 0, 0, {}, {0xc0de, 7});
  f.py_code(0xc0de, "<gen>", "second");  // the address now holds another code object
  f.add(Kind::kAlloc, Api::kMemAlloc, 0x3000, 100, 0, 0, {}, {0xc0de, 7});
  f.add(Kind::kAlloc, Api::kMemAlloc, 0x4000, 100, 0, 0, {}, {0xbad, 3});  // never announced
  auto s = f.build();
  REQUIRE(s.stacks.size() == 3);
  const auto& t = s.device_traces[0];
  REQUIRE(t[1].stack == t[3].stack);
  const auto frame = [&](size_t entry) { return s.stacks.at(t[entry].stack).at(0); };
  REQUIRE(frame(1) == snap::Frame{"a.py", 7, "first"});
  REQUIRE(frame(5) == snap::Frame{"<gen>", 7, "second"});
  REQUIRE(frame(7) == snap::Frame{"<python>", 3, "<unknown>"});
}

TEST_CASE("mapping a handle created elsewhere (NCCL import) is not an anomaly") {
  Feeder f;
  f.add(Kind::kMap, Api::kMemMap, 0x100000, 2 << 20, /*device from the handle*/ 1, /*handle*/ 500);
  f.add(Kind::kUnmap, Api::kMemUnmap, 0x100000, 2 << 20);
  f.add(Kind::kRelease, Api::kMemRelease, 500, 0);
  auto s = f.build();
  REQUIRE(s.tool->anomalies.empty());
  // Another process's memory: no segment, no trace entry, no bytes; nothing left listed.
  for (const auto& tr : s.device_traces) REQUIRE(tr.empty());
  REQUIRE(s.segments.empty());
  REQUIRE(s.tool->imported_mappings.empty());
  REQUIRE(s.tool->vmm_handles.empty());
}

TEST_CASE("VMM handles: retains, releases in either order, imports, failed releases") {
  Feeder f;
  // NCCL's free: retain from the address, release, unmap, release: freed once, at the end.
  f.add(Kind::kCreate, Api::kMemCreate, 7, 2 << 20, 0);
  f.add(Kind::kMap, Api::kMemMap, 0x100000, 2 << 20, 0, 7);
  f.add(Kind::kRetain, Api::kMemRetainAllocationHandle, 7, 0, -1, 0x100000);
  f.add(Kind::kRelease, Api::kMemRelease, 7, 0);
  auto s = f.build();
  REQUIRE(s.tool->devices[0].live_bytes == (2u << 20));
  f.add(Kind::kUnmap, Api::kMemUnmap, 0x100000, 2 << 20);
  f.add(Kind::kRelease, Api::kMemRelease, 7, 0);
  s = f.build();
  REQUIRE(s.tool->devices[0].live_bytes == 0);
  REQUIRE(s.tool->vmm_handles.empty());
  // Released while mapped: the memory lives until the unmap.
  f.add(Kind::kCreate, Api::kMemCreate, 8, 4 << 20, 0);
  f.add(Kind::kMap, Api::kMemMap, 0x800000, 4 << 20, 0, 8);
  f.add(Kind::kRelease, Api::kMemRelease, 8, 0);
  s = f.build();
  REQUIRE(s.tool->devices[0].live_bytes == (4u << 20));
  REQUIRE(s.tool->vmm_handles.size() == 1);
  // A release the driver refused gives the reference back.
  f.add(Kind::kUnmap, Api::kMemUnmap, 0x800000, 4 << 20);
  REQUIRE(f.build().tool->devices[0].live_bytes == 0);
  f.add(Kind::kFreeFailed, Api::kMemRelease, 8, 0);
  s = f.build();
  REQUIRE(s.tool->devices[0].live_bytes == (4u << 20));
  REQUIRE(s.tool->vmm_handles.size() == 1);
  f.add(Kind::kRelease, Api::kMemRelease, 8, 0);
  REQUIRE(f.build().tool->devices[0].live_bytes == 0);
  // Imported: mapped and listed, never counted; a third release is a stray one.
  f.add(Kind::kImport, Api::kMemImportFromShareableHandle, 9, 0, 1);
  f.add(Kind::kMap, Api::kMemMap, 0x2000000, 2 << 20, 1, 9);
  s = f.build();
  REQUIRE(s.tool->imported_mappings.size() == 1);
  REQUIRE(s.tool->imported_mappings[0].device == 1);
  REQUIRE(s.tool->imported_mappings[0].handle == 9);
  REQUIRE(s.segments.empty());
  f.add(Kind::kRelease, Api::kMemRelease, 9, 0);
  f.add(Kind::kUnmap, Api::kMemUnmap, 0x2000000, 2 << 20);
  f.add(Kind::kRelease, Api::kMemRelease, 9, 0);
  s = f.build();
  REQUIRE(s.tool->imported_mappings.empty());
  REQUIRE(s.tool->anomalies.size() == 1);
  REQUIRE(s.tool->anomalies[0].kind == "release_unknown_handle");
  REQUIRE(s.tool->devices[0].peak_bytes == (4u << 20));
  REQUIRE(s.tool->devices[0].allocations == 2);
  REQUIRE(s.tool->devices[0].frees == 2);
}

TEST_CASE("CUDA IPC mappings are imported memory: listed, never counted, closed once") {
  Feeder f;
  f.add(Kind::kMapImported, Api::kIpcOpenMemHandle, 0x5000000, 2 << 20, 1, 0, {0x10});
  auto s = f.build();
  REQUIRE(s.segments.empty());
  REQUIRE(s.tool->imported_mappings.size() == 1);
  REQUIRE(s.tool->imported_mappings[0].addr == 0x5000000);
  REQUIRE(s.tool->imported_mappings[0].size == (2u << 20));
  REQUIRE(s.tool->imported_mappings[0].device == 1);
  REQUIRE(s.tool->imported_mappings[0].handle == 0);
  REQUIRE(s.tool->imported_mappings[0].stack >= 0);
  for (const auto& d : s.tool->devices) REQUIRE(d.live_bytes == 0);
  // A close the driver refused keeps the mapping; a second successful close is a stray one.
  f.add(Kind::kUnmapImported, Api::kIpcCloseMemHandle, 0x5000000, 0);
  f.add(Kind::kFreeFailed, Api::kIpcCloseMemHandle, 0x5000000, 0);
  REQUIRE(f.build().tool->imported_mappings.size() == 1);
  f.add(Kind::kUnmapImported, Api::kIpcCloseMemHandle, 0x5000000, 0);
  f.add(Kind::kUnmapImported, Api::kIpcCloseMemHandle, 0x5000000, 0);
  s = f.build();
  REQUIRE(s.tool->imported_mappings.empty());
  REQUIRE(s.tool->anomalies.size() == 1);
  REQUIRE(s.tool->anomalies[0].kind == "unmap_unknown_range");
  REQUIRE(s.tool->anomalies[0].api == "cuIpcCloseMemHandle");
  REQUIRE(s.segments.empty());
}

TEST_CASE("contexts: measured as the driver's figure less what the device already held") {
  Feeder f;
  constexpr uint64_t kMiB = 1 << 20;
  // Device 0's primary context: NVML says 500 MiB right after it was created.
  f.add(Kind::kContextCreated, Api::kDevicePrimaryCtxRetain, 0, 0, 0, 0xc0);
  REQUIRE(f.model.take_new_context() == 0);
  REQUIRE_FALSE(f.model.take_new_context());
  f.model.measure_new_context(500 * kMiB);
  // Another thread's retain that raced with the first one: the same context, no second entry.
  f.add(Kind::kContextCreated, Api::kDevicePrimaryCtxRetain, 0, 0, 0, 0xc0);
  REQUIRE_FALSE(f.model.take_new_context());
  f.add(Kind::kAlloc, Api::kMemAlloc, 0x1000, 8 * kMiB);
  // A second context on device 0: 500 + 8 + 300 MiB now, so it cost 300 MiB.
  f.add(Kind::kContextCreated, Api::kCtxCreate, 0, 0, 0, 0xc1);
  REQUIRE(f.model.take_new_context() == 0);
  f.model.measure_new_context(808 * kMiB);
  // One on device 1 that nobody measured (no NVML figure): never listed, but still ended.
  f.add(Kind::kContextCreated, Api::kCtxCreate, 0, 0, 1, 0xc2);
  REQUIRE(f.model.take_new_context() == 1);
  f.add(Kind::kContextDestroyed, Api::kCtxDestroy, 0, 0, -1, 0xc2);
  // cuCtxDestroy ends the context of its handle; the primary context's last release ends it.
  f.add(Kind::kContextDestroyed, Api::kCtxDestroy, 0, 0, -1, 0xc1);
  const uint64_t destroyed_at = f.clock;
  f.add(Kind::kContextDestroyed, Api::kDevicePrimaryCtxRelease, 0, 0, 0, 0);
  const auto s = f.build();
  const auto& c = s.tool->contexts;
  REQUIRE(c.size() == 2);
  CHECK(c[0].device == 0);
  CHECK(c[0].bytes == 500 * kMiB);
  CHECK(c[0].api == "cuDevicePrimaryCtxRetain");
  CHECK(c[0].handle == 0xc0);
  CHECK(c[1].bytes == 300 * kMiB);
  CHECK(c[1].api == "cuCtxCreate");
  CHECK(c[1].end_time_us ==
        static_cast<int64_t>(1'700'000'000'000'000ull + (destroyed_at - 1'000'000'000ull) / 1000));
  CHECK(c[0].end_time_us > c[1].end_time_us);
  // Context records are no memory events.
  CHECK(s.tool->events_total == 1);
  CHECK(s.tool->end_time_us == c[0].end_time_us);
}

TEST_CASE("a PyTorch free_completed without a stack takes its request's, else its allocation's") {
  using wire::TorchAction;
  Feeder f;
  auto torch = [&](TorchAction a, uint64_t addr, uint64_t size, std::vector<uint64_t> frames) {
    f.add(Kind::kTorchBlock, Api::kNone, addr, size, 0, static_cast<uint64_t>(a),
          std::move(frames));
  };
  torch(TorchAction::kSegmentAlloc, 0x100000, 2 << 20, {0x10});
  torch(TorchAction::kAlloc, 0x100000, 512, {0x20});          // a
  torch(TorchAction::kAlloc, 0x100200, 512, {0x21});          // b
  torch(TorchAction::kFreeRequested, 0x100000, 512, {0x30});  // a, completed at once
  torch(TorchAction::kFreeCompleted, 0x100000, 512, {});
  torch(TorchAction::kFreeRequested, 0x100200, 512, {0x31});  // b, completed by a later call
  torch(TorchAction::kAlloc, 0x100400, 512, {0x22});          // c
  torch(TorchAction::kFreeCompleted, 0x100200, 512, {});
  torch(TorchAction::kFreeCompleted, 0x100400, 512, {});  // c's request was never seen
  torch(TorchAction::kAlloc, 0x100600, 512, {0x23});      // d: a completion with its own stack
  torch(TorchAction::kFreeRequested, 0x100600, 512, {0x32});
  torch(TorchAction::kFreeCompleted, 0x100600, 512, {0x33});
  const auto s = f.build();
  const auto& tr = s.device_traces.at(0);
  REQUIRE(tr.size() == 12);
  REQUIRE(tr[4].action == Action::kFreeCompleted);
  REQUIRE(tr[4].stack == tr[3].stack);  // a: its request's
  REQUIRE(tr[7].stack == tr[5].stack);  // b: its request's, though completed later
  REQUIRE(tr[8].stack == tr[6].stack);  // c: its allocation's
  REQUIRE(tr[4].stack >= 0);
  REQUIRE(tr[11].stack != tr[10].stack);  // d: recorded with its own, kept
}

TEST_CASE("PyTorch's blocks: the large pool splits above 1 MiB left, the small pool always") {
  using wire::TorchAction;
  constexpr uint64_t MiB = 1 << 20;
  Feeder f;
  auto torch = [&](TorchAction a, uint64_t addr, uint64_t size) {
    f.add(Kind::kTorchBlock, Api::kNone, addr, size, 0, static_cast<uint64_t>(a), {0x10});
  };
  const uint64_t large = 0x10000000, small = 0x20000000;
  torch(TorchAction::kSegmentAlloc, large, 20 * MiB);
  torch(TorchAction::kAlloc, large, 3 * MiB);                         // 1 MiB left before the next
  torch(TorchAction::kAlloc, large + 4 * MiB, 2 * MiB);               // 1 MiB + 512 B left
  torch(TorchAction::kAlloc, large + 7 * MiB + 512, 13 * MiB - 512);  // to the segment's end
  torch(TorchAction::kSegmentAlloc, small, 2 * MiB);
  torch(TorchAction::kAlloc, small, 3 * MiB / 2);  // 512 KiB left: split in the small pool
  const auto s = f.build();
  REQUIRE(s.segments.size() == 2);
  const auto& lg = s.segments[0];
  REQUIRE(lg.address == large);
  CHECK(lg.segment_type == "large");
  REQUIRE(lg.blocks.size() == 4);
  // should_split() is `remaining > kSmallSize`: exactly 1 MiB stays in the block.
  CHECK(lg.blocks[0].size == 4 * MiB);
  CHECK(lg.blocks[0].requested_size == 3 * MiB);
  CHECK(lg.blocks[1].address == large + 4 * MiB);
  CHECK(lg.blocks[1].size == 2 * MiB);
  CHECK(lg.blocks[2].state == "inactive");
  CHECK(lg.blocks[2].size == MiB + 512);
  CHECK(lg.blocks[3].size == 13 * MiB - 512);
  CHECK(lg.allocated_size == 19 * MiB - 512);
  const auto& sm = s.segments[1];
  REQUIRE(sm.address == small);
  CHECK(sm.segment_type == "small");
  REQUIRE(sm.blocks.size() == 2);
  CHECK(sm.blocks[0].size == 3 * MiB / 2);
  CHECK(sm.blocks[1].state == "inactive");
  CHECK(sm.blocks[1].size == MiB / 2);
  CHECK(sm.allocated_size == 3 * MiB / 2);
}

TEST_CASE("ownership walks: one per first record, continuations append, all kept in ring order") {
  Feeder f;
  auto owners = [&](uint64_t aux, std::vector<uint64_t> words) {
    collect::Record r;
    r.ev.kind = Kind::kTorchOwners;
    r.ev.aux = aux;
    r.ev.flags = wire::kFlagStringRecord;
    r.ev.size = words.size() * sizeof(uint64_t);
    r.ev.tid = 42;
    r.ev.time_ns = f.clock += 1000;
    r.text.assign(reinterpret_cast<const char*>(words.data()), words.size() * sizeof(uint64_t));
    f.model.add(r);
  };
  const uint64_t first = wire::kOwnersFirst;
  owners(3, {0x9000, 64});  // a continuation before any walk of its role: its first was dropped
  owners(1 | first, {0x1000, 4096, 0x2000, 512});
  owners(2 | first, {});     // no gradients yet
  owners(1, {0x3000, 256});  // the parameter walk goes on
  owners(2 | first, {0x4000, 4096});
  owners(3 | first, {0x5000, 8192});
  owners(2, {0x6000, 512});  // appends to the newest gradient walk
  const auto s = f.build();
  const auto& w = s.tool->ownership;
  REQUIRE(w.size() == 4);
  // Times: epoch us of the first record of each walk (the Feeder's clock starts 1 s into the run).
  const int64_t t0 = 1'700'000'000'000'000;
  CHECK(w[0].time_us == t0 + 2);
  CHECK(w[0].role == snap::OwnerRole::kParameter);
  CHECK(w[0].tensors ==
        std::vector<std::pair<uint64_t, uint64_t>>{{0x1000, 4096}, {0x2000, 512}, {0x3000, 256}});
  CHECK(w[1].time_us == t0 + 3);
  CHECK(w[1].role == snap::OwnerRole::kGradient);
  CHECK(w[1].tensors.empty());
  CHECK(w[2].time_us == t0 + 5);
  CHECK(w[2].role == snap::OwnerRole::kGradient);
  CHECK(w[2].tensors == std::vector<std::pair<uint64_t, uint64_t>>{{0x4000, 4096}, {0x6000, 512}});
  CHECK(w[3].role == snap::OwnerRole::kOptimizerState);
  CHECK(w[3].tensors == std::vector<std::pair<uint64_t, uint64_t>>{{0x5000, 8192}});
  // Walks are no trace events.
  CHECK(s.tool->events_total == 0);
  for (const auto& tr : s.device_traces) CHECK(tr.empty());
  // A role the preload never sends is a corrupt record.
  REQUIRE_THROWS_AS(owners(9 | first, {}), collect::CorruptRing);
  REQUIRE_THROWS_AS(owners(0, {}), collect::CorruptRing);
}
