// Device, VMM and host memory: entries, bytes, anomalies, undone frees and PyTorch's adoption.
#include <catch2/catch.hpp>

#include "live/device_allocations.h"
#include "record_builder.h"

using namespace cumemtrace;
using snap::Action;
using test::record;
using wire::Api;
using wire::Kind;

namespace {

struct Memory {
  collect::DeviceLedger ledger;
  collect::TraceLog trace{0, ledger};
  collect::DeviceAllocations memory{trace, ledger};

  std::vector<std::pair<Action, uint64_t>> entries() const {
    snap::Snapshot s;
    trace.write(s);
    std::vector<std::pair<Action, uint64_t>> out;
    for (const auto& e : s.device_traces.at(0)) out.emplace_back(e.action, e.addr);
    return out;
  }
  snap::ToolSection tool() const {
    snap::ToolSection t;
    memory.write(t);
    return t;
  }
};

}  // namespace

TEST_CASE("allocations: an allocation and its free write five entries and count once") {
  Memory m;
  m.memory.on_alloc(record(Kind::kAlloc, Api::kMemAllocAsync, 0x1000, 4096), 5, 2);
  m.memory.on_free(record(Kind::kFree, Api::kMemFreeAsync, 0x1000, 0), 6, -1);
  CHECK(m.entries() == std::vector<std::pair<Action, uint64_t>>{{Action::kSegmentAlloc, 0x1000},
                                                                {Action::kAlloc, 0x1000},
                                                                {Action::kFreeRequested, 0x1000},
                                                                {Action::kFreeCompleted, 0x1000},
                                                                {Action::kSegmentFree, 0x1000}});
  snap::Snapshot s;
  m.trace.write(s);
  CHECK(s.device_traces[0][0].async_pool);  // both of a pool's allocation entries
  CHECK(s.device_traces[0][1].async_pool);
  CHECK_FALSE(s.device_traces[0][2].async_pool);
  CHECK(m.ledger.devices()[0].peak.bytes == 4096);
  CHECK(m.ledger.devices()[0].live == 0);
}

TEST_CASE("allocations: a second free is a double free, an unknown one is named so") {
  Memory m;
  m.memory.on_alloc(record(Kind::kAlloc, Api::kMemAlloc, 0x1000, 64), 1, -1);
  m.memory.on_free(record(Kind::kFree, Api::kMemFree, 0x1000, 0), 2, -1);
  m.memory.on_free(record(Kind::kFree, Api::kMemFree, 0x1000, 0), 3, 4);
  m.memory.on_free(record(Kind::kFree, Api::kMemFree, 0x9000, 0), 4, -1);
  const auto t = m.tool();
  REQUIRE(t.anomalies.size() == 2);
  CHECK(t.anomalies[0].kind == "double_free");
  CHECK(t.anomalies[0].api == "cuMemFree");
  CHECK(t.anomalies[0].stack == 4);
  CHECK(t.anomalies[1].kind == "free_unknown_pointer");
  CHECK(t.anomalies[1].addr == 0x9000);
}

TEST_CASE("allocations: a refused free brings the allocation back, counted once") {
  Memory m;
  m.memory.on_alloc(record(Kind::kAlloc, Api::kMemAlloc, 0x1000, 64), 1, 3);
  m.memory.on_free(record(Kind::kFree, Api::kMemFree, 0x1000, 0), 2, -1);
  m.memory.on_free_failed(record(Kind::kFreeFailed, Api::kMemFree, 0x1000, 0), 3);
  CHECK(m.ledger.devices()[0].live == 64);
  CHECK(m.ledger.devices()[0].allocations == 1);
  CHECK(m.ledger.devices()[0].frees == 0);
  CHECK(m.entries().size() == 7);  // 2 + 3 + the allocation written again
  snap::Snapshot s;
  m.memory.write_segments(s);
  REQUIRE(s.segments.size() == 1);
  CHECK(s.segments[0].stack == 3);
  // A second refusal of the same free removes nothing: the undo is spent.
  m.memory.on_free_failed(record(Kind::kFreeFailed, Api::kMemFree, 0x1000, 0), 4);
  CHECK(m.entries().size() == 7);
}

TEST_CASE("allocations: VMM bytes live from create until released and unmapped") {
  Memory m;
  m.memory.on_alloc(record(Kind::kCreate, Api::kMemCreate, 0x51, 2 << 20), 1, -1);
  m.memory.on_alloc(record(Kind::kMap, Api::kMemMap, 0x10000, 2 << 20, 0, 0x51), 2, -1);
  m.memory.on_free(record(Kind::kRelease, Api::kMemRelease, 0x51, 0), 3, -1);
  CHECK(m.ledger.devices()[0].live == 2 << 20);  // still mapped
  m.memory.on_free(record(Kind::kUnmap, Api::kMemUnmap, 0x10000, 2 << 20), 4, -1);
  CHECK(m.ledger.devices()[0].live == 0);
  CHECK(m.entries() == std::vector<std::pair<Action, uint64_t>>{{Action::kSegmentMap, 0x10000},
                                                                {Action::kSegmentUnmap, 0x10000}});
}

TEST_CASE("allocations: PyTorch's adoption hides the driver's entries, keeps its bytes") {
  Memory m;
  m.memory.on_alloc(record(Kind::kAlloc, Api::kMemAlloc, 0x1000, 2 << 20), 1, -1);
  m.memory.on_alloc(record(Kind::kAlloc, Api::kMemAlloc, 0x9000, 64), 2, -1);
  m.memory.adopt_allocation(0x1000);
  m.memory.adopt_allocation(0x1000);  // a second adoption finds nothing more
  CHECK(m.entries() == std::vector<std::pair<Action, uint64_t>>{{Action::kSegmentAlloc, 0x9000},
                                                                {Action::kAlloc, 0x9000}});
  snap::Snapshot s;
  m.memory.write_segments(s);
  REQUIRE(s.segments.size() == 1);  // the adopted one is PyTorch's to show
  CHECK(s.segments[0].address == 0x9000);
  CHECK(m.ledger.devices()[0].live == (2 << 20) + 64);
  // Its free writes nothing; the other's does.
  m.memory.on_free(record(Kind::kFree, Api::kMemFree, 0x1000, 0), 3, -1);
  CHECK(m.entries().size() == 2);
  CHECK(m.ledger.devices()[0].live == 64);
}

TEST_CASE("allocations: adopted mappings report whether all were small-pool pages") {
  Memory m;
  const uint64_t page = 2 << 20;
  m.memory.on_alloc(record(Kind::kCreate, Api::kMemCreate, 0xa1, page), 1, -1);
  m.memory.on_alloc(record(Kind::kCreate, Api::kMemCreate, 0xa2, 2 * page), 1, -1);
  m.memory.on_alloc(record(Kind::kMap, Api::kMemMap, 0x100000, page, 0, 0xa1), 2, -1);
  m.memory.on_alloc(record(Kind::kMap, Api::kMemMap, 0x100000 + page, 2 * page, 0, 0xa2), 2, -1);
  auto a = m.memory.adopt_mappings(0x100000, page, page);
  CHECK(a.any);
  CHECK(a.all_small);
  a = m.memory.adopt_mappings(0x100000, 3 * page, page);  // the first is adopted already
  CHECK(a.any);
  CHECK_FALSE(a.all_small);
  CHECK(m.entries().empty());
  CHECK_FALSE(m.memory.adopt_mappings(0x100000, 3 * page, page).any);
}

TEST_CASE("allocations: host memory and imported mappings are listed apart, count no bytes") {
  Memory m;
  m.memory.on_alloc(record(Kind::kHostAlloc, Api::kMemHostAlloc, 0x7000, 100), 1, -1);
  m.memory.on_alloc(record(Kind::kMapImported, Api::kIpcOpenMemHandle, 0x8000, 200), 2, -1);
  const auto t = m.tool();
  REQUIRE(t.host_allocations.size() == 1);
  CHECK(t.host_allocations[0].api == "cuMemHostAlloc");
  REQUIRE(t.imported_mappings.size() == 1);
  CHECK(t.imported_mappings[0].size == 200);
  CHECK(m.ledger.devices().empty());
}
