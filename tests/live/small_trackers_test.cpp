// The small trackers: contexts, pool samples, ownership walks and the stack table.
#include <catch2/catch.hpp>

#include "live/context_memory.h"
#include "live/ownership_walks.h"
#include "live/pool_samples.h"
#include "live/stack_table.h"
#include "record_builder.h"

using namespace cumemtrace;
using test::record;
using wire::Api;
using wire::Kind;

TEST_CASE("contexts: a measured context costs what the driver holds beyond the known bytes") {
  collect::ContextMemory c;
  c.on_context(record(Kind::kContextCreated, Api::kDevicePrimaryCtxRetain, 0, 0, 1, 0xc1), 10);
  CHECK(c.take_new() == 1);
  CHECK_FALSE(c.take_new());
  CHECK(c.unmeasured_device() == 1);
  c.measure(500, 100);
  CHECK_FALSE(c.unmeasured_device());
  // A racing second retain of the same primary context is the same one.
  c.on_context(record(Kind::kContextCreated, Api::kDevicePrimaryCtxRetain, 0, 0, 1, 0xc1), 11);
  CHECK_FALSE(c.take_new());
  c.on_context(record(Kind::kContextCreated, Api::kCtxCreate, 0, 0, 1, 0xc2), 12);
  c.measure(900, 100);  // 900 - 100 live - 400 of the first context
  c.on_context(record(Kind::kContextDestroyed, Api::kCtxDestroy, 0, 0, 1, 0xc2), 12);
  snap::ToolSection t;
  c.write(t);
  REQUIRE(t.contexts.size() == 2);
  CHECK(t.contexts[0].bytes == 400);
  CHECK(t.contexts[0].api == "cuDevicePrimaryCtxRetain");
  CHECK(t.contexts[1].bytes == 400);
  CHECK(t.contexts[1].end_time_us == 13);  // ends after it began, even at the same time
}

TEST_CASE("pools: samples kept where reserved bytes change, plus each pool's latest") {
  collect::PoolSamples p;
  auto sample = [&](uint64_t pool, uint64_t reserved, int64_t t) {
    p.on_pool_usage(record(Kind::kPoolUsage, Api::kNone, pool, reserved, 0, 0), t);
  };
  sample(0x91, 100, 1);
  sample(0x91, 100, 2);
  sample(0x91, 200, 3);
  sample(0x91, 200, 4);
  snap::ToolSection t;
  p.write(t);
  REQUIRE(t.pool_memory.size() == 3);
  CHECK(t.pool_memory[0].time_us == 1);
  CHECK(t.pool_memory[1].time_us == 3);
  CHECK(t.pool_memory[2].time_us == 4);  // the latest, unchanged but the pool's state now
}

TEST_CASE("ownership: continuation records extend their role's latest walk") {
  collect::OwnershipWalks w;
  auto rec = [](uint64_t aux, std::vector<uint64_t> pairs) {
    auto r = record(Kind::kTorchOwners, Api::kNone, 0, 0, 0, aux);
    r.text.assign(reinterpret_cast<const char*>(pairs.data()), pairs.size() * 8);
    return r;
  };
  CHECK_FALSE(w.on_owners(rec(1, {0x10, 4}), 1));  // its first record dropped: nothing
  CHECK(w.on_owners(rec(1 | wire::kOwnersFirst, {0x10, 4}), 2));
  CHECK_FALSE(w.on_owners(rec(1, {0x20, 8}), 3));
  REQUIRE(w.walks().size() == 1);
  CHECK(w.walks()[0].time_us == 2);
  CHECK(w.walks()[0].tensors == std::vector<std::pair<uint64_t, uint64_t>>{{0x10, 4}, {0x20, 8}});
  CHECK_THROWS_AS(w.on_owners(rec(9 | wire::kOwnersFirst, {}), 4), collect::CorruptRing);
}

TEST_CASE("stacks: equal frames are one stack; a code address announced again names later ones") {
  collect::StackTable st;
  auto rec = [](std::vector<uint64_t> py) {
    auto r = record(Kind::kAlloc, Api::kMemAlloc, 0, 0);
    r.pyframes = std::move(py);
    return r;
  };
  CHECK(st.intern(record(Kind::kAlloc, Api::kMemAlloc, 0, 0)) == -1);
  st.announce_code(0xc0de, std::string("a.py\0f", 6));
  const auto first = st.intern(rec({0xc0de, 3}));
  st.announce_code(0xc0de, std::string("a.py\0f", 6));  // same names: same index
  CHECK(st.intern(rec({0xc0de, 3})) == first);
  st.announce_code(0xc0de, std::string("b.py\0g", 6));
  const auto second = st.intern(rec({0xc0de, 3}));
  CHECK(second != first);
  const auto a = st.render(static_cast<size_t>(first), nullptr);
  const auto b = st.render(static_cast<size_t>(second), nullptr);
  REQUIRE(a.size() == 1);
  CHECK(a[0].filename == "a.py");
  CHECK(a[0].name == "f");
  CHECK(a[0].line == 3);
  CHECK(b[0].filename == "b.py");
}
