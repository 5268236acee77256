// The device ledger: live bytes, the peak and its time, the window peak, and an undone free.
#include <catch2/catch.hpp>

#include "live/device_ledger.h"

using namespace cumemtrace;

TEST_CASE("ledger: the peak is the highest live bytes, at the time that reached it") {
  collect::DeviceLedger l;
  l.grow(1, 100, 10, -1);
  l.grow(1, 50, 20, -1);
  l.shrink(1, 100);
  l.grow(1, 60, 30, -1);  // 110: below the peak of 150
  const auto& d = l.devices().at(1);
  CHECK(l.devices().size() == 2);
  CHECK(d.live == 110);
  CHECK(d.peak.bytes == 150);
  CHECK(d.peak.time_us == 20);
  CHECK(d.allocations == 3);
  CHECK(d.frees == 1);
  CHECK(d.bytes_allocated == 210);
  CHECK(d.bytes_freed == 100);
  CHECK(l.at_peak_bytes() == 0);  // device 1 is below its peak, device 0 has none
  l.grow(1, 40, 40, -1);
  CHECK(l.at_peak_bytes() == 150);  // back at 150: at the peak (not above it: time unchanged)
  CHECK(l.devices()[1].peak.time_us == 20);
}

TEST_CASE("ledger: the window peak restarts from the live bytes, the overall peak does not") {
  collect::DeviceLedger l;
  l.grow(0, 300, 1, -1);
  l.shrink(0, 200);
  l.reset_window_peaks();
  CHECK(l.devices()[0].window_peak.bytes == 100);
  l.grow(0, 50, 2, -1);
  CHECK(l.devices()[0].window_peak.bytes == 150);
  CHECK(l.devices()[0].peak.bytes == 300);
}

TEST_CASE("ledger: a restored allocation counts its bytes again, not a new allocation") {
  collect::DeviceLedger l;
  l.grow(0, 64, 1, -1);
  l.shrink(0, 64);
  l.restore(0, 64, 2, -1);
  const auto& d = l.devices()[0];
  CHECK(d.live == 64);
  CHECK(d.allocations == 1);
  CHECK(d.frees == 0);
}

TEST_CASE("ledger: a free larger than the live bytes leaves zero, never wraps") {
  collect::DeviceLedger l;
  l.grow(0, 10, 1, -1);
  l.shrink(0, 30);
  CHECK(l.devices()[0].live == 0);
  CHECK(l.devices()[0].bytes_freed == 10);
}

TEST_CASE("ledger: bytes per stack only once asked for, and taken once") {
  collect::DeviceLedger l;
  l.grow(0, 10, 1, 4);
  CHECK(l.take_stack_bytes().empty());
  l.count_stack_bytes();
  l.grow(0, 10, 2, 4);
  l.grow(0, 5, 3, 4);
  const auto bytes = l.take_stack_bytes();
  REQUIRE(bytes.size() == 1);
  CHECK(bytes.at(4) == 15);
  CHECK(l.take_stack_bytes().empty());
}

TEST_CASE("ledger: a device ordinal out of range is device 0, not a huge table") {
  collect::DeviceLedger l;
  l.grow(1 << 20, 8, 1, -1);
  l.grow(-3, 8, 1, -1);
  REQUIRE(l.devices().size() == 1);
  CHECK(l.devices()[0].live == 16);
}

TEST_CASE("ledger: the graph pool keeps its latest and highest reading") {
  collect::DeviceLedger l;
  l.graph_pool_reading(0, 100);
  l.graph_pool_reading(0, 40);
  CHECK(l.devices()[0].graph_reserved == 40);
  CHECK(l.devices()[0].graph_reserved_peak.bytes == 100);
}
