// Event times of a TSC ring into CLOCK_MONOTONIC ns (live/event_clock.h), with given pairs.
#include <catch2/catch.hpp>

#include "live/event_clock.h"
#include "live/ring_reader.h"

using namespace cumemtrace;

TEST_CASE("TSC ticks are placed back from the newest pair at the measured tick length") {
  // The ring started at tick 1,000,000 = 5,000,000 ns; 4 ticks per ns.
  collect::EventClock c(1'000'000, 5'000'000);
  c.refresh(5'000'000, 6'000'000);  // 4,000,000 ticks over 1,000,000 ns
  CHECK(c.to_monotonic_ns(5'000'000) == 6'000'000);
  CHECK(c.to_monotonic_ns(1'000'000) == 5'000'000);
  CHECK(c.to_monotonic_ns(3'000'000) == 5'500'000);
  CHECK(c.to_monotonic_ns(5'400'000) == 6'100'000);  // published after the pair was read
  CHECK(c.to_monotonic_ns(999'000) == 5'000'000);    // never before the ring's start
  // A later pair: the ratio is taken over the whole baseline (8,000,000 ticks, 2,000,000 ns).
  c.refresh(9'000'000, 7'000'000);
  CHECK(c.to_monotonic_ns(9'000'000) == 7'000'000);
  CHECK(c.to_monotonic_ns(7'000'000) == 6'500'000);
}

TEST_CASE("before a measurable baseline every event is the newest pair's time") {
  collect::EventClock c(1'000'000, 5'000'000);
  c.refresh(1'000'400, 5'000'100);  // 100 ns: the pairs' jitter would be the ratio
  CHECK(c.to_monotonic_ns(1'000'200) == 5'000'100);
  CHECK(c.to_monotonic_ns(1'000'000) == 5'000'000);
  c.refresh(900'000, 4'000'000);  // a pair before the start is ignored
  CHECK(c.to_monotonic_ns(1'000'200) == 5'000'100);
}

TEST_CASE("a monotonic ring's times pass through; an unknown clock is refused") {
  wire::RingHeader h{};
  h.time_source = wire::kTimeMonotonic;
  collect::EventClock mono(h);
  CHECK(mono.to_monotonic_ns(123'456'789) == 123'456'789);
  h.time_source = 7;
  CHECK_THROWS_AS(collect::EventClock(h), collect::CorruptRing);
}
