// The trace log: the bound on entries, what it drops, and PyTorch's adoption marked in place.
#include <catch2/catch.hpp>

#include "live/trace_log.h"

using namespace cumemtrace;
using snap::Action;
using snap::Source;

namespace {

std::vector<std::pair<Action, uint64_t>> shown(const collect::TraceLog& log, size_t device = 0) {
  snap::Snapshot s;
  log.write(s);
  std::vector<std::pair<Action, uint64_t>> out;
  for (const auto& e : s.device_traces.at(device)) out.emplace_back(e.action, e.addr);
  return out;
}

}  // namespace

TEST_CASE("trace log: every field of an entry is written as pushed, on its device's list") {
  collect::DeviceLedger ledger;
  collect::TraceLog log(0, ledger);
  log.push(2, {.action = Action::kAlloc,
               .addr = 0x1000,
               .size = 4096,
               .stream = 9,
               .time_us = 55,
               .stack = 3,
               .tid = 11,
               .stream_per_thread = true,
               .source = Source::kGraph,
               .async_pool = true});
  snap::Snapshot s;
  log.write(s);
  REQUIRE(s.device_traces.size() == 3);   // devices 0 and 1 listed, empty
  REQUIRE(ledger.devices().size() == 3);  // a device with an entry is the ledger's too
  REQUIRE(s.device_traces[2].size() == 1);
  const auto& e = s.device_traces[2][0];
  CHECK(e.action == Action::kAlloc);
  CHECK(e.addr == 0x1000);
  CHECK(e.size == 4096);
  CHECK(e.stream == 9);
  CHECK(e.time_us == 55);
  CHECK(e.stack == 3);
  CHECK(e.tid == 11);
  CHECK(e.stream_per_thread);
  CHECK(e.source == Source::kGraph);
  CHECK(e.async_pool);
}

TEST_CASE("trace log: a bound keeps the newest entries and counts the dropped ones") {
  collect::DeviceLedger ledger;
  collect::TraceLog log(3, ledger);
  for (uint64_t a = 1; a <= 5; ++a) log.push(0, {.action = Action::kAlloc, .addr = a});
  CHECK(log.dropped() == 2);
  CHECK(log.size() == 3);
  CHECK(shown(log) == std::vector<std::pair<Action, uint64_t>>{
                          {Action::kAlloc, 3}, {Action::kAlloc, 4}, {Action::kAlloc, 5}});
}

TEST_CASE("trace log: adopted entries are never written, and count nothing against the bound") {
  collect::DeviceLedger ledger;
  collect::TraceLog log(3, ledger);
  log.push(0, {.action = Action::kAlloc, .addr = 0xa});
  log.push(0, {.action = Action::kSegmentAlloc, .addr = 0xb});
  log.push(0, {.action = Action::kAlloc, .addr = 0xb});
  // The driver's pair at 0xb is PyTorch's segment: both adopted, newest match of each action.
  CHECK(log.adopt(Action::kAlloc, 0xb));
  CHECK(log.adopt(Action::kSegmentAlloc, 0xb));
  CHECK(log.size() == 1);
  // PyTorch's own entries are never adopted.
  log.push(0, {.action = Action::kSegmentAlloc, .addr = 0xb, .source = Source::kPytorch});
  CHECK_FALSE(log.adopt(Action::kSegmentAlloc, 0xb));
  log.push(0, {.action = Action::kAlloc, .addr = 0xc});
  // Three counted entries: nothing dropped although five were pushed (the adopted two free
  // their places, as if never pushed).
  CHECK(log.dropped() == 0);
  CHECK(shown(log) == std::vector<std::pair<Action, uint64_t>>{{Action::kAlloc, 0xa},
                                                               {Action::kSegmentAlloc, 0xb},
                                                               {Action::kAlloc, 0xc}});
  log.push(0, {.action = Action::kAlloc, .addr = 0xd});
  CHECK(log.dropped() == 1);  // 0xa goes, and the adopted entries behind it with it
  CHECK(shown(log) == std::vector<std::pair<Action, uint64_t>>{{Action::kSegmentAlloc, 0xb},
                                                               {Action::kAlloc, 0xc},
                                                               {Action::kAlloc, 0xd}});
}

TEST_CASE("trace log: adoption looks back over the newest kAdoptWindow counted entries only") {
  collect::DeviceLedger ledger;
  collect::TraceLog log(0, ledger);
  log.push(0, {.action = Action::kSegmentMap, .addr = 0x100});
  log.push(0, {.action = Action::kSegmentMap, .addr = 0x200});
  for (size_t i = 0; i + 1 < collect::TraceLog::kAdoptWindow; ++i)
    log.push(0, {.action = Action::kFreeRequested, .addr = 1});
  // 0x200 is the kAdoptWindow-th newest: still adoptable; 0x100 one further: not.
  CHECK_FALSE(log.adopt(Action::kSegmentMap, 0x100));
  CHECK(log.adopt(Action::kSegmentMap, 0x200));
  CHECK(log.size() == collect::TraceLog::kAdoptWindow);
}
