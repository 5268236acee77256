// Codec round trips over EVERY field of the snapshot model: JSON write -> read -> write gives the
// same bytes and the same model; the pickle writer -> pickle reader gives the same model; text
// that is not UTF-8 comes back as U+FFFD and stays stable; PyTorch's pickles (protocols 2 and 5,
// shared frame lists) read into the model through the one input path.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "io/snapshot_input.h"
#include "snapshot/pickle_reader.h"
#include "snapshot/pickle_writer.h"
#include "snapshot/snapshot_json_writer.h"
#include "snapshot/utf8.h"
#include "support/torch_fixture.h"

using namespace cumemtrace;
using snap::Source;

namespace {

// A new field in the model changes these sizes: add it to every_field() and same() below.
static_assert(sizeof(snap::TraceEntry) == 72);  // block_units: analysis only, never written
static_assert(sizeof(snap::Segment) == 128);
static_assert(sizeof(snap::Block) == 64);
static_assert(sizeof(snap::Frame) == 104);
static_assert(sizeof(snap::Annotation) == 80);
static_assert(sizeof(snap::PytorchInfo) == 208);
static_assert(sizeof(snap::ToolSection) == 872);
static_assert(sizeof(snap::ContextMemory) == 72);

snap::Snapshot every_field() {
  snap::Snapshot s;
  s.stacks = {{{"train.py", 12, "step"},
               {"module.py", 1775, "Module._wrapped_call_impl", "transformer.h.0.mlp"},
               {"caf\xc3\xa9.py", 3, "<module>"}},
              {{"lib/x.so", 0, "ncclMemAlloc"}}};
  snap::Segment g;
  g.device = 1;
  g.address = 0x7f0000000000;
  g.total_size = 20 << 20;
  g.allocated_size = 2 << 20;
  g.active_size = 3 << 20;
  g.requested_size = (2 << 20) - 100;
  g.stream = 77;
  g.segment_type = "small";
  g.is_expandable = true;
  g.private_pool = true;
  g.stack = 1;
  g.source = Source::kPytorch;
  g.blocks = {{g.address, 2 << 20, (2 << 20) - 100, "active_allocated", 0},
              {g.address + (2 << 20), 1 << 20, 1000, "active_pending_free", 1},
              {g.address + (3 << 20), 17 << 20, 0, "inactive", snap::kNoStack}};
  s.segments.push_back(g);
  snap::Segment d;  // a driver segment: defaults where it has nothing to say
  d.address = 0x1000;
  d.total_size = d.allocated_size = d.active_size = d.requested_size = 4096;
  d.blocks = {{0x1000, 4096, 4096, "active_allocated", 1}};
  s.segments.push_back(d);
  s.device_traces.resize(2);
  using A = snap::Action;
  s.device_traces[1] = {
      {A::kSegmentAlloc, 0x7f0000000000, 20 << 20, 77, 1000, snap::kNoStack, 0, 11, false,
       Source::kPytorch},
      {A::kAlloc, 0x7f0000000000, (2 << 20) - 100, 77, 1001, 0, 0, 11, false, Source::kPytorch},
      {A::kSegmentAlloc, 0x5000, 3 << 20, 78, 1001, snap::kNoStack, 0, 11, false, Source::kDriver,
       true},
      {A::kAlloc, 0x5000, 3 << 20, 78, 1001, 1, 0, 11, false, Source::kDriver, true},
      {A::kFreeRequested, 0x7f0000000000, 5, 0, 1002, snap::kNoStack, 0, 0, true},
      {A::kFreeCompleted, 0x7f0000000000, 5, 0, 1003, snap::kNoStack, 0, 12, false},
      {A::kSegmentFree, 0x1000, 4096, 3, 1004, snap::kNoStack, 0, 12},
      {A::kSegmentMap, 0x9000, 8192, 3, 1005, 1, 0, 13, true, Source::kPytorch},
      {A::kSegmentUnmap, 0x9000, 8192, 3, 1006, snap::kNoStack, 0, 13},
      {A::kSnapshot, 0, 0, 0, 1007, snap::kNoStack, 0, 0},
      {A::kOom, 0, 1 << 30, 9, 1008, 0, 12345, 14, false, Source::kPytorch},
  };
  s.device_traces[0] = {{A::kAlloc, 0x1000, 4096, 0, 999, 1, 0, 15}};
  // Categories (analysis::label_categories' names): "unknown" on PyTorch's segment event, as the
  // labelling puts it; a driver allocation is another library's.
  s.device_traces[1][0].category = snap::Category::kUnknown;
  s.device_traces[1][1].category = snap::Category::kOptimizerState;
  s.device_traces[1][3].category = snap::Category::kLibrary;
  s.device_traces[1][4].category = snap::Category::kActivation;
  s.device_traces[0][0].category = snap::Category::kParameter;
  s.annotations = {{"epoch \xc3\xa9", "START", 1, 990},
                   {"epoch \xc3\xa9", "END", 1, 1009},
                   {"m", "MARK", 0, 995}};
  s.allocator_settings = {{"expandable_segments", "True"},
                          {"roundup_power2_divisions", "{\"1\":0}"}};
  snap::ToolSection t;
  t.tool_version = "9.9.9";
  t.pid = 4242;
  t.ppid = 1;
  t.exe = "/opt/app/bin/caf\xc3\xa9";
  t.argv = {"caf\xc3\xa9", "--x", ""};
  t.hostname = "node-7";
  t.rank = {{"RANK", "1"}, {"WORLD_SIZE", "2"}};
  t.start_time_us = 900;
  t.end_time_us = 2000;
  t.reason = "request";
  t.tag = "request-2";
  t.ended = {"signal", 3, 11};
  t.events_total = 100;
  t.events_dropped = 4;
  t.ring_error = "corrupt ring: record 9";
  t.time_resolution_ns = 4'000'000;
  t.trace_entries_dropped = 6;
  t.devices = {{0, 4096, 999, 0, 1, 0}, {1, 20 << 20, 1001, 2 << 20, 3, 2}};
  t.vmm_handles = {{0xabc, 2 << 20, 1, 1, 1010}};
  t.imported_mappings = {{0x7000000, 2 << 20, 1, 0xabd, 0, 1011}};
  t.host_allocations = {{0x7f00, 512, "cudaHostAlloc", 1, 1012}};
  t.anomalies = {{"double_free", 0x1000, "cuMemFree", 0, 1013, 16}};
  t.threads = {{"11", "main"}, {"12", "w\xc3\xa9rker"}};
  t.driver_memory = {{950, 0, 1 << 20}, {1500, 1, 30 << 20}};
  t.pool_memory = {{1001, 1, 0x55aa00, 4 << 20, 3 << 20}, {1900, 1, 0x55aa00, 2 << 20, 0}};
  t.contexts = {{1, 300 << 20, 960, 0, "cuDevicePrimaryCtxRetain", 0x5500},
                {0, 64 << 20, 970, 1400, "cuCtxCreate", 0x5510}};
  t.pytorch = snap::PytorchInfo{"2.11.0+cu130", "native", "blocks", "torch imported", true};
  t.pytorch->alloc_confs = {{900, "expandable_segments:True"}, {1200, "max_split_size_mb:128"}};
  t.pytorch->memory_fractions = {{1000, 1, "0.25", 20 << 20, 80 << 20}};
  t.pytorch->private_pools = {{1100, "cuda_graph"}, {1300, "mempool"}};
  // Pointers up to 2^53-1, the largest every JSON reader holds exactly; an empty walk (no
  // gradients now).
  t.ownership = {{1001,
                  snap::OwnerRole::kParameter,
                  {{0x7f0000000000, 2 << 20}, {(uint64_t{1} << 53) - 1, 512}}},
                 {1002, snap::OwnerRole::kGradient, {}},
                 {1003, snap::OwnerRole::kOptimizerState, {{0x7f0000200000, 1 << 20}}}};
  t.tensor_names = {{1001, snap::OwnerRole::kParameter, {{"139637976727552", "h.0.mlp.weight"}}},
                    {1003, snap::OwnerRole::kOptimizerState, {}}};
  s.tool = t;
  return s;
}

void same_stack(const snap::Snapshot& a, int32_t x, const snap::Snapshot& b, int32_t y) {
  REQUIRE((x == snap::kNoStack) == (y == snap::kNoStack));
  if (x == snap::kNoStack) return;
  CHECK(a.stacks.at(static_cast<size_t>(x)) == b.stacks.at(static_cast<size_t>(y)));
}

// Every field, compared one by one (stacks by content: readers may number them differently).
void same(const snap::Snapshot& a, const snap::Snapshot& b) {
  REQUIRE(a.segments.size() == b.segments.size());
  for (size_t i = 0; i < a.segments.size(); ++i) {
    const auto &x = a.segments[i], &y = b.segments[i];
    CHECK(x.device == y.device);
    CHECK(x.address == y.address);
    CHECK(x.total_size == y.total_size);
    CHECK(x.allocated_size == y.allocated_size);
    CHECK(x.active_size == y.active_size);
    CHECK(x.requested_size == y.requested_size);
    CHECK(x.stream == y.stream);
    CHECK(x.segment_type == y.segment_type);
    CHECK(x.is_expandable == y.is_expandable);
    CHECK(x.private_pool == y.private_pool);
    CHECK(x.source == y.source);
    same_stack(a, x.stack, b, y.stack);
    REQUIRE(x.blocks.size() == y.blocks.size());
    for (size_t j = 0; j < x.blocks.size(); ++j) {
      CHECK(x.blocks[j].address == y.blocks[j].address);
      CHECK(x.blocks[j].size == y.blocks[j].size);
      CHECK(x.blocks[j].requested_size == y.blocks[j].requested_size);
      CHECK(x.blocks[j].state == y.blocks[j].state);
      same_stack(a, x.blocks[j].stack, b, y.blocks[j].stack);
    }
  }
  REQUIRE(a.device_traces.size() == b.device_traces.size());
  for (size_t d = 0; d < a.device_traces.size(); ++d) {
    REQUIRE(a.device_traces[d].size() == b.device_traces[d].size());
    for (size_t i = 0; i < a.device_traces[d].size(); ++i) {
      const auto &x = a.device_traces[d][i], &y = b.device_traces[d][i];
      CHECK(x.action == y.action);
      CHECK(x.addr == y.addr);
      CHECK(x.size == y.size);
      CHECK(x.stream == y.stream);
      CHECK(x.time_us == y.time_us);
      CHECK(x.device_free == y.device_free);
      CHECK(x.tid == y.tid);
      CHECK(x.stream_per_thread == y.stream_per_thread);
      CHECK(x.async_pool == y.async_pool);
      CHECK(x.source == y.source);
      CHECK(x.category == y.category);
      // Frames are written on alloc, oom and segment_map entries only (PyTorch's layout).
      const bool framed = x.action == snap::Action::kAlloc || x.action == snap::Action::kOom ||
                          x.action == snap::Action::kSegmentMap;
      same_stack(a, framed ? x.stack : snap::kNoStack, b, y.stack);
    }
  }
  REQUIRE(a.annotations.size() == b.annotations.size());
  for (size_t i = 0; i < a.annotations.size(); ++i) {
    CHECK(a.annotations[i].name == b.annotations[i].name);
    CHECK(a.annotations[i].stage == b.annotations[i].stage);
    CHECK(a.annotations[i].device == b.annotations[i].device);
    CHECK(a.annotations[i].time_us == b.annotations[i].time_us);
  }
  CHECK(a.allocator_settings == b.allocator_settings);
  REQUIRE(a.tool.has_value() == b.tool.has_value());
  if (!a.tool) return;
  const auto &t = *a.tool, &u = *b.tool;
  CHECK(t.schema_version == u.schema_version);
  CHECK(t.tool_version == u.tool_version);
  CHECK(t.pid == u.pid);
  CHECK(t.ppid == u.ppid);
  CHECK(t.exe == u.exe);
  CHECK(t.argv == u.argv);
  CHECK(t.hostname == u.hostname);
  CHECK(t.rank == u.rank);
  CHECK(t.start_time_us == u.start_time_us);
  CHECK(t.end_time_us == u.end_time_us);
  CHECK(t.reason == u.reason);
  CHECK(t.tag == u.tag);
  CHECK(t.ended.how == u.ended.how);
  CHECK(t.ended.code == u.ended.code);
  CHECK(t.ended.signal == u.ended.signal);
  CHECK(t.events_total == u.events_total);
  CHECK(t.events_dropped == u.events_dropped);
  CHECK(t.ring_error == u.ring_error);
  CHECK(t.time_resolution_ns == u.time_resolution_ns);
  CHECK(t.trace_entries_dropped == u.trace_entries_dropped);
  REQUIRE(t.devices.size() == u.devices.size());
  for (size_t i = 0; i < t.devices.size(); ++i) {
    CHECK(t.devices[i].device == u.devices[i].device);
    CHECK(t.devices[i].peak_bytes == u.devices[i].peak_bytes);
    CHECK(t.devices[i].peak_time_us == u.devices[i].peak_time_us);
    CHECK(t.devices[i].live_bytes == u.devices[i].live_bytes);
    CHECK(t.devices[i].allocations == u.devices[i].allocations);
    CHECK(t.devices[i].frees == u.devices[i].frees);
  }
  REQUIRE(t.vmm_handles.size() == u.vmm_handles.size());
  for (size_t i = 0; i < t.vmm_handles.size(); ++i) {
    CHECK(t.vmm_handles[i].handle == u.vmm_handles[i].handle);
    CHECK(t.vmm_handles[i].size == u.vmm_handles[i].size);
    CHECK(t.vmm_handles[i].device == u.vmm_handles[i].device);
    CHECK(t.vmm_handles[i].time_us == u.vmm_handles[i].time_us);
    same_stack(a, t.vmm_handles[i].stack, b, u.vmm_handles[i].stack);
  }
  REQUIRE(t.imported_mappings.size() == u.imported_mappings.size());
  for (size_t i = 0; i < t.imported_mappings.size(); ++i) {
    CHECK(t.imported_mappings[i].addr == u.imported_mappings[i].addr);
    CHECK(t.imported_mappings[i].size == u.imported_mappings[i].size);
    CHECK(t.imported_mappings[i].device == u.imported_mappings[i].device);
    CHECK(t.imported_mappings[i].handle == u.imported_mappings[i].handle);
    CHECK(t.imported_mappings[i].time_us == u.imported_mappings[i].time_us);
    same_stack(a, t.imported_mappings[i].stack, b, u.imported_mappings[i].stack);
  }
  REQUIRE(t.host_allocations.size() == u.host_allocations.size());
  for (size_t i = 0; i < t.host_allocations.size(); ++i) {
    CHECK(t.host_allocations[i].addr == u.host_allocations[i].addr);
    CHECK(t.host_allocations[i].size == u.host_allocations[i].size);
    CHECK(t.host_allocations[i].api == u.host_allocations[i].api);
    CHECK(t.host_allocations[i].time_us == u.host_allocations[i].time_us);
    same_stack(a, t.host_allocations[i].stack, b, u.host_allocations[i].stack);
  }
  REQUIRE(t.anomalies.size() == u.anomalies.size());
  for (size_t i = 0; i < t.anomalies.size(); ++i) {
    CHECK(t.anomalies[i].kind == u.anomalies[i].kind);
    CHECK(t.anomalies[i].addr == u.anomalies[i].addr);
    CHECK(t.anomalies[i].api == u.anomalies[i].api);
    CHECK(t.anomalies[i].time_us == u.anomalies[i].time_us);
    CHECK(t.anomalies[i].tid == u.anomalies[i].tid);
    same_stack(a, t.anomalies[i].stack, b, u.anomalies[i].stack);
  }
  CHECK(t.threads == u.threads);
  REQUIRE(t.driver_memory.size() == u.driver_memory.size());
  for (size_t i = 0; i < t.driver_memory.size(); ++i) {
    CHECK(t.driver_memory[i].time_us == u.driver_memory[i].time_us);
    CHECK(t.driver_memory[i].device == u.driver_memory[i].device);
    CHECK(t.driver_memory[i].used_bytes == u.driver_memory[i].used_bytes);
  }
  REQUIRE(t.pool_memory.size() == u.pool_memory.size());
  for (size_t i = 0; i < t.pool_memory.size(); ++i) {
    CHECK(t.pool_memory[i].time_us == u.pool_memory[i].time_us);
    CHECK(t.pool_memory[i].device == u.pool_memory[i].device);
    CHECK(t.pool_memory[i].pool == u.pool_memory[i].pool);
    CHECK(t.pool_memory[i].reserved_bytes == u.pool_memory[i].reserved_bytes);
    CHECK(t.pool_memory[i].used_bytes == u.pool_memory[i].used_bytes);
  }
  REQUIRE(t.contexts.size() == u.contexts.size());
  for (size_t i = 0; i < t.contexts.size(); ++i) {
    CHECK(t.contexts[i].device == u.contexts[i].device);
    CHECK(t.contexts[i].bytes == u.contexts[i].bytes);
    CHECK(t.contexts[i].time_us == u.contexts[i].time_us);
    CHECK(t.contexts[i].end_time_us == u.contexts[i].end_time_us);
    CHECK(t.contexts[i].api == u.contexts[i].api);
    CHECK(t.contexts[i].handle == u.contexts[i].handle);
  }
  REQUIRE(t.ownership.size() == u.ownership.size());
  for (size_t i = 0; i < t.ownership.size(); ++i) {
    CHECK(t.ownership[i].time_us == u.ownership[i].time_us);
    CHECK(t.ownership[i].role == u.ownership[i].role);
    CHECK(t.ownership[i].tensors == u.ownership[i].tensors);
  }
  REQUIRE(t.tensor_names.size() == u.tensor_names.size());
  for (size_t i = 0; i < t.tensor_names.size(); ++i) {
    CHECK(t.tensor_names[i].time_us == u.tensor_names[i].time_us);
    CHECK(t.tensor_names[i].role == u.tensor_names[i].role);
    CHECK(t.tensor_names[i].names == u.tensor_names[i].names);
  }
  REQUIRE(t.pytorch.has_value() == u.pytorch.has_value());
  if (t.pytorch) {
    CHECK(t.pytorch->version == u.pytorch->version);
    CHECK(t.pytorch->backend == u.pytorch->backend);
    CHECK(t.pytorch->capture == u.pytorch->capture);
    CHECK(t.pytorch->why == u.pytorch->why);
    CHECK(t.pytorch->expandable_segments == u.pytorch->expandable_segments);
    REQUIRE(t.pytorch->alloc_confs.size() == u.pytorch->alloc_confs.size());
    for (size_t i = 0; i < t.pytorch->alloc_confs.size(); ++i) {
      CHECK(t.pytorch->alloc_confs[i].time_us == u.pytorch->alloc_confs[i].time_us);
      CHECK(t.pytorch->alloc_confs[i].alloc_conf == u.pytorch->alloc_confs[i].alloc_conf);
    }
    REQUIRE(t.pytorch->memory_fractions.size() == u.pytorch->memory_fractions.size());
    for (size_t i = 0; i < t.pytorch->memory_fractions.size(); ++i) {
      const auto &a = t.pytorch->memory_fractions[i], &b = u.pytorch->memory_fractions[i];
      CHECK(std::tie(a.time_us, a.device, a.fraction, a.allowed_bytes, a.device_total) ==
            std::tie(b.time_us, b.device, b.fraction, b.allowed_bytes, b.device_total));
    }
    REQUIRE(t.pytorch->private_pools.size() == u.pytorch->private_pools.size());
    for (size_t i = 0; i < t.pytorch->private_pools.size(); ++i) {
      CHECK(t.pytorch->private_pools[i].time_us == u.pytorch->private_pools[i].time_us);
      CHECK(t.pytorch->private_pools[i].kind == u.pytorch->private_pools[i].kind);
    }
  }
}

std::string from_hex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return out;
}

const char* const kTorchShapedP2 =
    "80027d71002858080000007365676d656e747371015d71027d710328580600000064657669636571044b0058070000"
    "00"
    "6164647265737371058a06000000000001580a000000746f74616c5f73697a6571064a00002000580e000000616c6c"
    "6f"
    "63617465645f73697a6571074d0002580b0000006163746976655f73697a6571084d0002580e000000726571756573"
    "74"
    "65645f73697a6571094df401580600000073747265616d710a4b00580c0000007365676d656e745f74797065710b58"
    "05"
    "000000736d616c6c710c580f0000007365676d656e745f706f6f6c5f6964710d4b004b0086710e580d00000069735f"
    "65"
    "7870616e6461626c65710f8958060000006672616d657371105d7111287d711228580800000066696c656e616d6571"
    "13"
    "5808000000747261696e2e7079711458040000006c696e6571154b0c58040000006e616d6571165804000000737465"
    "70"
    "7117757d71182868135808000000636166c3a92e7079711968154b03681658080000003c6d6f64756c653e711a7565"
    "58"
    "06000000626c6f636b73711b5d711c287d711d2868058a06000000000001580400000073697a65711e4d000268094d"
    "f4"
    "0158050000007374617465711f58100000006163746976655f616c6c6f6361746564712068106811757d7121286805"
    "8a"
    "06000200000001681e4a00fe1f0068094b00681f5808000000696e616374697665712268105d712375657561580d00"
    "00"
    "006465766963655f74726163657371245d71255d7126287d7127285806000000616374696f6e71285805000000616c"
    "6c"
    "6f637129580400000061646472712a8a06000000000001681e4df401680a4b00580700000074696d655f7573712b8a"
    "07"
    "00401e18240a0668106811757d712c286828580e000000667265655f726571756573746564712d682a8a0600000000"
    "00"
    "01681e4df401680a4b00682b8a0701401e18240a06681068117565615812000000616c6c6f6361746f725f73657474"
    "69"
    "6e6773712e7d712f285813000000657870616e6461626c655f7365676d656e74737130895818000000726f756e6475"
    "70"
    "5f706f776572325f6469766973696f6e7371317d713258010000003171334b007375581400000065787465726e616c"
    "5f"
    "616e6e6f746174696f6e7371345d71357d713628681658010000007871375805000000737461676571385805000000"
    "53"
    "54415254713968044b00682b8a0700401e18240a0658050000006578747261713a473ff80000000000007561752e";

const char* const kTorchShapedP5 =
    "800595d9020000000000007d94288c087365676d656e7473945d947d94288c06646576696365944b008c0761646472"
    "65"
    "7373948a060000000000018c0a746f74616c5f73697a65944a000020008c0e616c6c6f63617465645f73697a65944d"
    "00"
    "028c0b6163746976655f73697a65944d00028c0e7265717565737465645f73697a65944df4018c0673747265616d94"
    "4b"
    "008c0c7365676d656e745f74797065948c05736d616c6c948c0f7365676d656e745f706f6f6c5f6964944b004b0086"
    "94"
    "8c0d69735f657870616e6461626c6594898c066672616d6573945d94287d94288c0866696c656e616d65948c087472"
    "61"
    "696e2e7079948c046c696e65944b0c8c046e616d65948c047374657094757d942868138c08636166c3a92e70799468"
    "15"
    "4b0368168c083c6d6f64756c653e9475658c06626c6f636b73945d94287d942868058a060000000000018c0473697a"
    "65"
    "944d000268094df4018c057374617465948c106163746976655f616c6c6f63617465649468106811757d942868058a"
    "06"
    "000200000001681e4a00fe1f0068094b00681f8c08696e6163746976659468105d94756575618c0d6465766963655f"
    "74"
    "7261636573945d945d94287d94288c06616374696f6e948c05616c6c6f63948c0461646472948a0600000000000168"
    "1e"
    "4df401680a4b008c0774696d655f7573948a0700401e18240a0668106811757d942868288c0e667265655f72657175"
    "65"
    "7374656494682a8a06000000000001681e4df401680a4b00682b8a0701401e18240a06681068117565618c12616c6c"
    "6f"
    "6361746f725f73657474696e6773947d94288c13657870616e6461626c655f7365676d656e747394898c18726f756e"
    "64"
    "75705f706f776572325f6469766973696f6e73947d948c0131944b0073758c1465787465726e616c5f616e6e6f7461"
    "74"
    "696f6e73945d947d942868168c0178948c057374616765948c0553544152549468044b00682b8a0700401e18240a06"
    "8c"
    "05657874726194473ff80000000000007561752e";

}  // namespace

TEST_CASE("JSON: write, read, write gives the same bytes and the same model, every field") {
  const auto s = every_field();
  const std::string once = snap::to_json(s);
  const auto r = snap::read_snapshot(once, "rt.json");
  same(s, r);
  CHECK(snap::to_json(r) == once);
  // What the writer writes is plain JSON for every other reader too.
  const auto j = nlohmann::json::parse(once);
  CHECK(j["cumemtrace"]["pytorch"]["backend"] == "native");
  CHECK(j["segments"][0]["source"] == "pytorch");
  CHECK_FALSE(j["segments"][1].contains("source"));
  CHECK(j["device_traces"][1][0]["source"] == "pytorch");
  CHECK_FALSE(j["device_traces"][1][2].contains("source"));
  CHECK(j["device_traces"][1][2]["async_pool"] == true);
  CHECK_FALSE(j["device_traces"][1][4].contains("async_pool"));
  CHECK(j["cumemtrace"]["pool_memory"][0]["reserved_bytes"] == 4 << 20);
  // A context in being has no end time; one destroyed has.
  CHECK_FALSE(j["cumemtrace"]["contexts"][0].contains("end_time_us"));
  CHECK(j["cumemtrace"]["contexts"][1]["end_time_us"] == 1400);
  // Categories by name, none where there is none; the walks as [pointer, bytes] pairs.
  CHECK(j["device_traces"][1][0]["category"] == "unknown");
  CHECK(j["device_traces"][1][1]["category"] == "optimizer_state");
  CHECK_FALSE(j["device_traces"][1][2].contains("category"));
  CHECK(j["device_traces"][1][3]["category"] == "library");
  CHECK(j["device_traces"][0][0]["category"] == "parameter");
  CHECK(j["cumemtrace"]["ownership"] ==
        nlohmann::json::parse(R"([{"time_us":1001,"role":"parameter","tensors":)"
                              R"([[139637976727552,2097152],[9007199254740991,512]]},)"
                              R"({"time_us":1002,"role":"gradient","tensors":[]},)"
                              R"({"time_us":1003,"role":"optimizer_state","tensors":)"
                              R"([[139637978824704,1048576]]}])"));
}

TEST_CASE("no ownership walks, no categories: neither key is written") {
  auto s = every_field();
  s.tool->ownership.clear();
  for (auto& tr : s.device_traces)
    for (auto& e : tr) e.category = snap::Category::kNone;
  const std::string json = snap::to_json(s);
  CHECK(json.find("\"ownership\"") == std::string::npos);
  CHECK(json.find("\"category\"") == std::string::npos);
  const auto r = snap::read_snapshot(json, "none.json");
  CHECK(r.tool->ownership.empty());
  same(s, r);
}

// memory_viz refuses a file where some entry has a category and none is "unknown" (the reference's
// trap 3): the writers put "unknown" on one entry then, and say nothing when one is there.
TEST_CASE("a labelled snapshot without \"unknown\" is written with one, JSON and pickle alike") {
  using A = snap::Action;
  using C = snap::Category;
  auto categories = [](const snap::Snapshot& s) {
    std::vector<std::string> out;
    for (const auto& tr : s.device_traces)
      for (const auto& e : tr) out.emplace_back(snap::category_name(e.category));
    return out;
  };
  auto both = [&](const snap::Snapshot& s) {
    const std::string once = snap::to_json(s);
    const auto from_json = snap::read_snapshot(once, "c.json");
    // Read back, the stand-in is a real "unknown": writing again gives the same bytes (the fuzz
    // targets' invariant).
    CHECK(snap::to_json(from_json) == once);
    const auto from_pickle = snap::read_pickle_snapshot(snap::to_pickle(s), "c.pickle");
    CHECK(categories(from_pickle) == categories(from_json));
    return categories(from_json);
  };
  snap::Snapshot s;
  s.tool = snap::ToolSection{};
  s.device_traces.resize(2);
  s.device_traces[0] = {{A::kAlloc, 0x1000, 512, 0, 1}};
  s.device_traces[1] = {{A::kAlloc, 0x2000, 512, 0, 2},
                        {A::kFreeRequested, 0x2000, 512, 0, 3},
                        {A::kFreeCompleted, 0x2000, 512, 0, 4},
                        {A::kSegmentFree, 0x2000, 2 << 20, 0, 5}};
  s.device_traces[1][0].category = C::kActivation;
  s.device_traces[0][0].category = C::kParameter;
  // The first entry without one, in device order: device 1's free_requested.
  CHECK(snap::unknown_category_stand_in(s) == snap::EntryIndex{1, 1});
  CHECK(both(s) == std::vector<std::string>{"parameter", "activation", "unknown", "", ""});
  // A free_completed is folded by the viewer into its request: never the one that carries it.
  s.device_traces[1][1].category = C::kTemporary;
  CHECK(both(s) == std::vector<std::string>{"parameter", "activation", "temporary", "", "unknown"});
  // Every entry labelled: the first one the viewer counts gives its category up.
  s.device_traces[1][2].category = C::kTemporary;
  s.device_traces[1][3].category = C::kLibrary;
  CHECK(both(s) ==
        std::vector<std::string>{"unknown", "activation", "temporary", "temporary", "library"});
  // One "unknown" anywhere: written as given.
  s.device_traces[1][3].category = C::kUnknown;
  CHECK_FALSE(snap::unknown_category_stand_in(s).has_value());
  CHECK(both(s) ==
        std::vector<std::string>{"parameter", "activation", "temporary", "temporary", "unknown"});
}

TEST_CASE("PyTorch's profiler-path categories: ours by name, the others unknown, never an error") {
  const std::string json =
      R"({"segments":[],"device_traces":[[)"
      R"({"action":"alloc","addr":4096,"size":512,"stream":0,"category":"parameter"},)"
      R"({"action":"alloc","addr":8192,"size":512,"stream":0,"category":"autograd_detail"},)"
      R"({"action":"alloc","addr":12288,"size":512,"stream":0,"category":"unknown"},)"
      R"({"action":"alloc","addr":16384,"size":512,"stream":0}]]})";
  const auto s = snap::read_snapshot(json, "profiler.json");
  REQUIRE(s.device_traces.at(0).size() == 4);
  CHECK(s.device_traces[0][0].category == snap::Category::kParameter);
  CHECK(s.device_traces[0][1].category == snap::Category::kUnknown);
  CHECK(s.device_traces[0][2].category == snap::Category::kUnknown);
  CHECK(s.device_traces[0][3].category == snap::Category::kNone);
  CHECK_THROWS_WITH(
      snap::read_snapshot(R"({"segments":[],"device_traces":[[)"
                          R"({"action":"alloc","addr":4096,"size":512,"stream":0,"category":3}]]})",
                          "bad.json"),
      "bad.json:offset 97: expected a string at device_traces[0][0].category");
}

TEST_CASE("ownership walks: what is not a walk is one clear error") {
  const std::string head =
      snap::to_json(every_field()).substr(0, snap::to_json(every_field()).rfind("\"ownership\""));
  auto read = [&](const std::string& walks) {
    return snap::read_snapshot(head + "\"ownership\":" + walks + "}}", "w.json");
  };
  CHECK(read(R"([{"time_us":5,"role":"gradient","tensors":[[1,2]]}])").tool->ownership.size() == 1);
  CHECK_THROWS_WITH(read(R"([{"time_us":5,"role":"buffer","tensors":[]}])"),
                    Catch::Contains("expected role \"parameter\", \"gradient\" or "
                                    "\"optimizer_state\" at cumemtrace.ownership[0].role"));
  CHECK_THROWS_WITH(read(R"([{"time_us":5,"role":"gradient","tensors":[[1,2,3]]}])"),
                    Catch::Contains("expected a [pointer, bytes] pair at "
                                    "cumemtrace.ownership[0].tensors[0][2]"));
  CHECK_THROWS_WITH(read(R"([{"time_us":5,"role":"gradient","tensors":[[1]]}])"),
                    Catch::Contains("expected a [pointer, bytes] pair"));
  CHECK_THROWS_WITH(read(R"([{"time_us":5,"role":"gradient","tensors":[7]}])"),
                    Catch::Contains("expected a [pointer, bytes] pair at "
                                    "cumemtrace.ownership[0].tensors[0]"));
  CHECK_THROWS_WITH(read(R"([{"time_us":5,"tensors":[]}])"),
                    Catch::Contains("expected key \"role\" at cumemtrace.ownership[0]"));
}

TEST_CASE("pickle: write, read gives the same model, every field") {
  const auto s = every_field();
  const auto r = snap::read_pickle_snapshot(snap::to_pickle(s), "rt.pickle");
  same(s, r);
  CHECK(snap::to_json(r) == snap::to_json(s));
  // A shared frames list is interned once, as the JSON reader does.
  CHECK(r.stacks.size() == 2);
}

TEST_CASE("text that is not UTF-8 is written as U+FFFD and round-trips stably") {
  auto s = every_field();
  auto& t = *s.tool;
  t.argv = {"caf\xe9", "\xff\xfe", "ok"};
  t.exe = "/tmp/\xc3";
  t.threads["13"] = "w\xe9rker\xff";
  t.rank["\xe9"] = "\xe9";
  t.rank["\xff"] = "dropped";  // the same key as "\xe9" once repaired: written once, first wins
  t.tag = "t\x80";
  t.hostname = "h\xed\xa0\x80";  // an encoded surrogate is not UTF-8 either
  s.annotations[0].name = "caf\xe9";
  s.stacks[0][0].filename = "/src/caf\xe9.py";
  s.stacks[0][0].name = "f\xf0\x9f";  // a truncated 4-byte sequence
  const std::string once = snap::to_json(s);
  REQUIRE(snap::valid_utf8(once));
  const auto r = snap::read_snapshot(once, "bytes.json");
  CHECK(r.tool->argv ==
        std::vector<std::string>{"caf\xef\xbf\xbd", "\xef\xbf\xbd\xef\xbf\xbd", "ok"});
  CHECK(r.tool->threads.at("13") == "w\xef\xbf\xbdrker\xef\xbf\xbd");
  CHECK(r.tool->rank.at("\xef\xbf\xbd") == "\xef\xbf\xbd");
  CHECK(r.annotations[0].name == "caf\xef\xbf\xbd");
  const auto& st = r.stacks.at(static_cast<size_t>(r.segments[0].blocks[0].stack));
  CHECK(st[0].filename == "/src/caf\xef\xbf\xbd.py");
  CHECK(st[0].name == "f\xef\xbf\xbd\xef\xbf\xbd");
  CHECK(r.tool->hostname == "h\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  CHECK(snap::to_json(r) == once);
  // Through the pickle writer the same text comes out.
  CHECK(snap::to_json(snap::read_pickle_snapshot(snap::to_pickle(s), "b.pickle")) == once);
  // Python's strict UTF-8 decoding (the unpickler's) accepts every string the pickle holds.
  CHECK(nlohmann::json::parse(once)["cumemtrace"]["argv"][0] == "caf\xef\xbf\xbd");
}

TEST_CASE(
    "a file without a tool section is PyTorch's: every entry and segment is pytorch-sourced") {
  auto s = every_field();
  s.tool.reset();
  for (auto& g : s.segments) g.source = Source::kDriver;
  const std::string once = snap::to_json(s);
  CHECK(once.find("\"source\"") == std::string::npos);
  const auto r = snap::read_snapshot(once, "torch.json");
  for (const auto& g : r.segments) CHECK(g.source == Source::kPytorch);
  for (const auto& tr : r.device_traces)
    for (const auto& e : tr) CHECK(e.source == Source::kPytorch);
  CHECK(snap::to_json(r) == once);
  const auto p = snap::read_pickle_snapshot(snap::to_pickle(s), "torch.pickle");
  CHECK(p.segments[1].source == Source::kPytorch);
  CHECK(snap::to_json(p) == once);
}

TEST_CASE("pickles as Python writes them, protocols 2 and 5, with shared frame lists") {
  for (const char* hex : {kTorchShapedP2, kTorchShapedP5}) {
    const auto s = snap::read_pickle_snapshot(from_hex(hex), "py.pickle");
    CHECK_FALSE(s.tool);
    REQUIRE(s.segments.size() == 1);
    const auto& g = s.segments[0];
    CHECK(g.address == uint64_t{1} << 40);
    CHECK(g.total_size == 2097152);
    CHECK(g.segment_type == "small");
    CHECK(g.source == Source::kPytorch);
    REQUIRE(g.blocks.size() == 2);
    CHECK(g.blocks[1].state == "inactive");
    CHECK(g.blocks[1].size == 2097152 - 512);
    CHECK(g.blocks[1].stack == snap::kNoStack);
    REQUIRE(s.device_traces.size() == 1);
    REQUIRE(s.device_traces[0].size() == 2);
    CHECK(s.device_traces[0][0].time_us == 1700000000000000);
    CHECK(s.device_traces[0][1].action == snap::Action::kFreeRequested);
    // One frames object, memo-fetched four times: one stack.
    REQUIRE(s.stacks.size() == 1);
    CHECK(s.stacks[0][1].filename == "caf\xc3\xa9.py");
    CHECK(g.stack == 0);
    CHECK(g.blocks[0].stack == 0);
    CHECK(s.device_traces[0][1].stack == 0);
    CHECK(s.allocator_settings.at("expandable_segments") == "false");
    CHECK(s.allocator_settings.at("roundup_power2_divisions") == "{\"1\":0}");
    REQUIRE(s.annotations.size() == 1);
    CHECK(s.annotations[0].stage == "START");
  }
}

TEST_CASE("pickle errors are one line naming the input, and the model's checks apply") {
  // A trace entry without "action": the builder's message, at the pickle offset of the dict.
  const std::string p = snap::to_pickle(every_field());
  std::string bad = p;
  const auto at = bad.find("free_requested");
  REQUIRE(at != std::string::npos);
  bad.replace(at, 14, "free_requestex");
  REQUIRE_THROWS_WITH(snap::read_pickle_snapshot(bad, "bad.pickle"),
                      Catch::StartsWith("bad.pickle:offset ") &&
                          Catch::Contains("expected a known action, not \"free_requestex\""));
  REQUIRE_THROWS_WITH(snap::read_pickle_snapshot(std::string("\x80\x04K\x01.", 5), "int.pickle"),
                      Catch::Contains("int.pickle: pickle offset 0: expected a dict at top level"));
}

TEST_CASE("one input path: the real PyTorch 2.11 pickle, by content", "[torch]") {
  const auto& facts = testing::torch_facts();
  const auto s = snap::read_snapshot_any(testing::kTorchPickle);
  CHECK_FALSE(s.tool);
  // The contract's fixture check, device 0 at snapshot time.
  uint64_t reserved = 0, allocated = 0, cached = 0, largest_free = 0;
  for (const auto& g : s.segments) {
    if (g.device != 0) continue;
    CHECK(g.source == Source::kPytorch);
    reserved += g.total_size;
    for (const auto& b : g.blocks) {
      if (b.state == "inactive") {
        cached += b.size;
        largest_free = std::max(largest_free, b.size);
      } else {
        allocated += b.size;
      }
    }
  }
  // PyTorch's own torch.cuda.memory_reserved() and memory_allocated() when it took the snapshot.
  CHECK(reserved == facts["memory_reserved"].get<uint64_t>());
  CHECK(allocated == facts["memory_allocated"].get<uint64_t>());
  CHECK(cached == reserved - allocated);
  CHECK(largest_free == 12582912);  // the 20 MiB segment's free 12 MiB
  // Written as JSON and read back, nothing changes.
  const std::string text = snap::to_json(s);
  CHECK(snap::to_json(snap::read_snapshot(text, "again.json")) == text);
}
