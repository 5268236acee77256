// The ring end to end in one process: the preload's producer against the collector's reader.
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "core/event_clock.h"
#include "core/ring_producer.h"
#include "live/ring_reader.h"
#include "support/memfd_ring.h"

using namespace cumemtrace;

namespace {

using TestRing = testing::MemfdRing;

wire::EventPayload event(uint64_t addr, uint64_t size, uint32_t tid = 1) {
  wire::EventPayload ev{};
  ev.kind = wire::Kind::kAlloc;
  ev.addr = addr;
  ev.size = size;
  ev.tid = tid;
  return ev;
}

}  // namespace

TEST_CASE("records with stacks and strings come back exactly, across wrap-around") {
  TestRing ring(wire::kMinCapacity);
  auto reader = ring.reader();
  std::vector<collect::Record> got;
  auto sink = [&](const collect::Record& r) { got.push_back(r); };
  uint64_t frames[40];
  for (unsigned i = 0; i < 40; ++i) frames[i] = 0x1000 + i;
  // 3000 records of 1 + 6 slots each wrap the 1024-slot ring many times.
  for (int round = 0; round < 3000; ++round) {
    auto ev = event(static_cast<uint64_t>(round), 100);
    ev.nframes = 40;
    REQUIRE(ring.producer.publish(ev, frames, sizeof frames));
    if (round % 100 == 99) reader.drain(sink);
  }
  reader.drain(sink);
  REQUIRE(got.size() == 3000);
  for (size_t i = 0; i < got.size(); ++i) {
    REQUIRE(got[i].ev.addr == i);
    REQUIRE(got[i].frames.size() == 40);
    REQUIRE(got[i].frames[39] == 0x1000 + 39);
  }
  got.clear();
  const std::string path(300, 'x');
  wire::EventPayload s{};
  s.kind = wire::Kind::kModule;
  s.flags = wire::kFlagStringRecord;
  s.size = path.size();
  REQUIRE(ring.producer.publish(s, path.data(), static_cast<uint32_t>(path.size())));
  reader.drain(sink);
  REQUIRE(got.size() == 1);
  REQUIRE(got[0].text == path);
  REQUIRE(ring.hdr->dropped.load() == 0);
}

TEST_CASE("native frames then (code, line) pairs of Python frames come back word for word") {
  TestRing ring(wire::kMinCapacity);
  auto reader = ring.reader();
  // 1 native frame and 3 Python frames fill one continuation slot's 7 words exactly.
  auto ev = event(0x5000, 64);
  ev.nframes = 1;
  ev.npyframes = 3;
  const uint64_t words[7] = {0x10, 0xc0de, 11, 0xc0df, 22, 0xc0e0, 33};
  REQUIRE(ring.producer.publish(ev, words, sizeof words));
  std::vector<collect::Record> got;
  REQUIRE(reader.drain([&](const collect::Record& r) { got.push_back(r); }) == 1);
  REQUIRE(got.size() == 1);
  REQUIRE(got[0].frames == std::vector<uint64_t>{0x10});
  REQUIRE(got[0].pyframes == std::vector<uint64_t>{0xc0de, 11, 0xc0df, 22, 0xc0e0, 33});
}

TEST_CASE("one-slot records written in place replace whatever the slot held before") {
  TestRing ring(wire::kMinCapacity);
  auto reader = ring.reader();
  std::vector<collect::Record> got;
  auto sink = [&](const collect::Record& r) { got.push_back(r); };
  uint64_t frames[14];
  for (unsigned i = 0; i < 14; ++i) frames[i] = 0x5000 + i;
  const std::string name(100, 'n');
  // Rounds alternate: stack records (1 + 2 slots) and string records (1 + 2), then records
  // written in place over the same slots, whose stale bytes (flags, extra_slots) must not show.
  for (int lap = 0; lap < 6; ++lap) {
    for (uint64_t i = 0; i < 300; ++i) {
      if (lap % 2 == 0) {
        auto ev = event(i, 7);
        ev.nframes = 14;
        REQUIRE(ring.producer.publish(ev, frames, sizeof frames));
        wire::EventPayload s{};
        s.kind = wire::Kind::kThreadName;
        s.flags = wire::kFlagStringRecord;
        s.size = name.size();
        REQUIRE(ring.producer.publish(s, name.data(), static_cast<uint32_t>(name.size())));
      } else {
        for (int k = 0; k < 5; ++k) {
          uint64_t ticket = 0;
          wire::EventPayload* ev = ring.producer.reserve_one(ticket);
          REQUIRE(ev != nullptr);
          *ev = event(1000 * i + static_cast<uint64_t>(k), 9, 3);
          ev->device = 2;
          ring.producer.commit_one(ticket);
        }
      }
      if (i % 100 == 99) reader.drain(sink);  // 600 or 500 slots: less than a lap
    }
    reader.drain(sink);
    if (lap % 2 == 0) {
      REQUIRE(got.size() == 600);
      REQUIRE(got[598].frames.size() == 14);
      REQUIRE(got[599].text == name);
    } else {
      REQUIRE(got.size() == 1500);
      for (size_t j = 0; j < got.size(); ++j) {
        const auto& r = got[j];
        REQUIRE(r.ev.addr == 1000 * (j / 5) + j % 5);
        REQUIRE(r.ev.size == 9);
        REQUIRE(r.ev.tid == 3);
        REQUIRE(r.ev.device == 2);
        REQUIRE(r.ev.extra_slots == 0);
        REQUIRE(r.ev.flags == 0);
        REQUIRE(r.frames.empty());
        REQUIRE(r.text.empty());
        REQUIRE(r.ticket == got[0].ticket + j);
      }
    }
    got.clear();
  }
  REQUIRE(ring.hdr->dropped.load() == 0);
}

TEST_CASE("a record that fills the ring exactly fits; the next waits for space") {
  TestRing ring(wire::kMinCapacity, 5'000'000);  // 5 ms bound
  auto reader = ring.reader();
  for (uint64_t i = 0; i < wire::kMinCapacity; ++i) {
    auto ev = event(i, 1);
    REQUIRE(ring.producer.publish(ev, nullptr, 0));
  }
  REQUIRE(ring.hdr->head.load() == wire::kMinCapacity);
  // Full and nobody draining: the bounded wait expires, the event is counted as dropped, and the
  // ring is marked stalled so that the next producer does not wait again.
  auto ev = event(9999, 1);
  REQUIRE_FALSE(ring.producer.publish(ev, nullptr, 0));
  REQUIRE(ring.hdr->dropped.load() == 1);
  REQUIRE(ring.hdr->stalled.load() == 1);
  REQUIRE_FALSE(ring.producer.publish(ev, nullptr, 0));
  REQUIRE(ring.hdr->dropped.load() == 2);
  size_t n = reader.drain([](const collect::Record&) {});
  REQUIRE(n == wire::kMinCapacity);
  REQUIRE(ring.producer.publish(ev, nullptr, 0));  // space again: recording resumes
  REQUIRE(ring.hdr->stalled.load() == 0);
}

TEST_CASE("a collector that is gone makes producers drop at once") {
  TestRing ring(wire::kMinCapacity, 10'000'000'000ull);
  for (uint64_t i = 0; i < wire::kMinCapacity; ++i) {
    auto ev = event(i, 1);
    REQUIRE(ring.producer.publish(ev, nullptr, 0));
  }
  ring.hdr->collector_state.store(wire::kCollectorGone);
  auto ev = event(1, 1);
  REQUIRE_FALSE(ring.producer.publish(ev, nullptr, 0));  // no 10 s wait
  REQUIRE(ring.hdr->dropped.load() == 1);
}

TEST_CASE("many producers: no loss, no phantom, per-thread order kept") {
  constexpr int kThreads = 8;
  constexpr uint64_t kPerThread = 50000;
  TestRing ring(4096);
  auto reader = ring.reader();
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint64_t frames[3] = {1, 2, 3};
      for (uint64_t i = 0; i < kPerThread; ++i) {
        auto ev = event(i, static_cast<uint64_t>(t), static_cast<uint32_t>(t + 1));
        ev.nframes = (i % 3 == 0) ? 3 : 0;  // mix one- and two-slot records
        ring.producer.publish(ev, frames, ev.nframes * 8u);
      }
      done.fetch_add(1);
    });
  }
  std::vector<uint64_t> next(kThreads, 0);
  uint64_t total = 0, last_ticket = 0;
  bool ordered = true;
  auto check = [&](const collect::Record& r) {
    const auto t = static_cast<size_t>(r.ev.tid - 1);
    if (t >= kThreads || r.ev.addr != next[t] || r.ev.size != t) ordered = false;
    if (total && r.ticket <= last_ticket) ordered = false;
    last_ticket = r.ticket;
    next[t]++;
    total++;
  };
  while (done.load() < kThreads) reader.drain(check);
  for (auto& th : threads) th.join();
  reader.drain(check);
  REQUIRE(ordered);
  REQUIRE(total == kThreads * kPerThread);
  REQUIRE(ring.hdr->dropped.load() == 0);
}

// The TSC, where events may read it (preload/core/event_clock.h).
static uint64_t tsc_now() {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return 0;
#endif
}

TEST_CASE("the ring's start pair is read together, in the clock its events count from") {
  const bool coarse = GENERATE(false, true);
  const clockid_t id = coarse ? CLOCK_MONOTONIC_COARSE : CLOCK_MONOTONIC;
  struct Restore {
    ~Restore() {
      uint64_t tsc, ns;
      preload::choose_event_clock(false, tsc, ns);
    }
  } restore;
  for (int i = 0; i < 100; ++i) {
    const uint64_t ns_before = preload::clock_ns(id), tsc_before = tsc_now();
    uint64_t start_tsc = 1, start_ns = 0;
    const auto source = preload::choose_event_clock(coarse, start_tsc, start_ns);
    const uint64_t tsc_after = tsc_now(), ns_after = preload::clock_ns(id);
    INFO("coarse " << coarse << " start " << start_ns << " in [" << ns_before << ", " << ns_after
                   << "]");
    REQUIRE(start_ns >= ns_before);
    REQUIRE(start_ns <= ns_after);
    if (source == wire::kTimeTsc) {
      REQUIRE(start_tsc >= tsc_before);
      REQUIRE(start_tsc <= tsc_after);
    } else {
      REQUIRE(start_tsc == 0);
    }
  }
}

TEST_CASE("event times come out in CLOCK_MONOTONIC ns whichever clock the producer read") {
  // The preload's choice for this machine (TSC ticks where the clocksource is the TSC), and
  // CUMEMTRACE_CLOCK=coarse's CLOCK_MONOTONIC_COARSE, which lags the clock by a tick (1-4 ms),
  // a little more where the tick that updates it comes late: two ticks are allowed.
  const bool coarse = GENERATE(false, true);
  struct Restore {
    ~Restore() {
      uint64_t tsc, ns;
      preload::choose_event_clock(false, tsc, ns);
    }
  } restore;
  timespec res{};
  clock_getres(CLOCK_MONOTONIC_COARSE, &res);
  const uint64_t lag = coarse ? 2 * (static_cast<uint64_t>(res.tv_sec) * 1'000'000'000 +
                                     static_cast<uint64_t>(res.tv_nsec))
                              : 0;
  TestRing ring(wire::kMinCapacity);
  // The start pair as the preload makes it: one read (a pair read apart is off by whatever
  // preempted the thread between its reads; seen at 20 us under the address sanitizer).
  ring.hdr->time_source =
      preload::choose_event_clock(coarse, ring.hdr->start_tsc, ring.hdr->start_monotonic_ns);
  REQUIRE(ring.hdr->time_source == (coarse                       ? wire::kTimeMonotonicCoarse
                                    : preload::g_event_clock_tsc ? wire::kTimeTsc
                                                                 : wire::kTimeMonotonic));
  auto reader = ring.reader();
  std::vector<std::pair<uint64_t, uint64_t>> bounds;  // monotonic ns before and after each
  std::vector<uint64_t> times;
  auto sink = [&](const collect::Record& r) { times.push_back(r.ev.time_ns); };
  for (int i = 0; i < 200; ++i) {
    const uint64_t before = preload::monotonic_ns();
    auto ev = event(static_cast<uint64_t>(i), 1);
    ev.time_ns = preload::event_time();
    REQUIRE(ring.producer.publish(ev, nullptr, 0));
    bounds.emplace_back(before, preload::monotonic_ns());
    if (i % 20 == 19) {
      std::this_thread::sleep_for(std::chrono::microseconds(300));
      reader.drain(sink);
    }
  }
  REQUIRE(times.size() == 200);
  // Within 20 us of the clock reads around it (a TSC tick is well under a nanosecond; raw ticks
  // or a wrong ratio would be far off), the coarse clock within its tick before them.
  for (size_t i = 0; i < times.size(); ++i) {
    INFO("event " << i << " time " << times[i] << " in [" << bounds[i].first << ", "
                  << bounds[i].second << "], coarse " << coarse << " lag " << lag);
    CHECK(times[i] + 20'000 + lag >= bounds[i].first);
    CHECK(times[i] <= bounds[i].second + 20'000);
  }
}

TEST_CASE("an interval in event units spans that many CLOCK_MONOTONIC ns") {
  // The pool sampler's interval (preload/core/event_clock.h: event_units), in the clock events
  // read: TSC ticks at a rate measured against CLOCK_MONOTONIC once 1 ms has passed, or ns.
  uint64_t start_tsc = 0, start_ns = 0;
  preload::choose_event_clock(false, start_tsc, start_ns);
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  for (int round = 0; round < 3; ++round) {
    // Each event time between two clock reads: the elapsed ns lie between the inner and the outer
    // distance, however long a preemption between the reads was.
    const uint64_t n0a = preload::monotonic_ns(), t0 = preload::event_time(),
                   n0b = preload::monotonic_ns();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const uint64_t n1a = preload::monotonic_ns(), t1 = preload::event_time(),
                   n1b = preload::monotonic_ns();
    // What the units say the elapsed ns were, against the clock: within 1%.
    const double per_ns = static_cast<double>(preload::event_units(1'000'000'000)) / 1e9;
    const double elapsed_ns = static_cast<double>(t1 - t0) / per_ns;
    INFO("round " << round << ": " << elapsed_ns << " ns by the units, " << (n1a - n0b) << " to "
                  << (n1b - n0a) << " ns");
    CHECK(elapsed_ns > 0.99 * static_cast<double>(n1a - n0b));
    CHECK(elapsed_ns < 1.01 * static_cast<double>(n1b - n0a));
  }
}

TEST_CASE("the reader refuses rings it cannot trust") {
  SECTION("wrong version") {
    TestRing ring(wire::kMinCapacity);
    ring.hdr->version = wire::kWireVersion + 1;
    REQUIRE_THROWS_WITH(ring.reader(), Catch::Contains("ring format version"));
  }
  SECTION("events timed by a clock it does not know") {
    TestRing ring(wire::kMinCapacity);
    ring.hdr->time_source = 9;
    REQUIRE_THROWS_WITH(ring.reader(), Catch::Contains("clock"));
  }
  SECTION("capacity not matching the memfd size") {
    TestRing ring(wire::kMinCapacity);
    ring.hdr->capacity = wire::kMinCapacity * 2;
    REQUIRE_THROWS_AS(ring.reader(), collect::CorruptRing);
  }
  SECTION("a record claiming too many continuation slots") {
    TestRing ring(wire::kMinCapacity);
    auto reader = ring.reader();
    auto* slots = reinterpret_cast<wire::Slot*>(static_cast<char*>(ring.map) + wire::kHeaderBytes);
    auto ev = event(1, 1);
    ev.extra_slots = 200;
    std::memcpy(slots[0].payload, &ev, sizeof ev);
    slots[0].seq.store(1);
    REQUIRE_THROWS_AS(reader.drain([](const collect::Record&) {}), collect::CorruptRing);
  }
  SECTION("a string longer than its slots") {
    TestRing ring(wire::kMinCapacity);
    auto reader = ring.reader();
    auto* slots = reinterpret_cast<wire::Slot*>(static_cast<char*>(ring.map) + wire::kHeaderBytes);
    wire::EventPayload ev{};
    ev.kind = wire::Kind::kModule;
    ev.flags = wire::kFlagStringRecord;
    ev.extra_slots = 1;
    ev.size = 1000;
    std::memcpy(slots[0].payload, &ev, sizeof ev);
    slots[1].seq.store(2);
    slots[0].seq.store(1);
    REQUIRE_THROWS_AS(reader.drain([](const collect::Record&) {}), collect::CorruptRing);
  }
  SECTION("Python frames beyond the record's slots: each frame is two words") {
    // One continuation slot holds 7 words: 1 native frame + 4 Python frames need 9.
    TestRing ring(wire::kMinCapacity);
    auto reader = ring.reader();
    auto ev = event(1, 1);
    ev.nframes = 1;
    ev.npyframes = 4;
    const uint64_t words[7] = {0x10, 0xc0de, 1, 0xc0df, 2, 0xc0e0, 3};
    REQUIRE(ring.producer.publish(ev, words, sizeof words));
    REQUIRE(ring.hdr->head.load() == 2);
    REQUIRE_THROWS_WITH(reader.drain([](const collect::Record&) {}),
                        Catch::Contains("has 1+4 frames in 1 slots"));
  }
  SECTION("an ownership walk that is not whole (pointer, bytes) pairs, or not bytes at all") {
    for (const bool string_record : {true, false}) {
      TestRing ring(wire::kMinCapacity);
      auto reader = ring.reader();
      wire::EventPayload ev{};
      ev.kind = wire::Kind::kTorchOwners;
      ev.aux = 1 | wire::kOwnersFirst;
      ev.flags = string_record ? wire::kFlagStringRecord : 0;
      ev.size = 24;  // one pair and a half
      const uint64_t words[3] = {0x7000, 512, 0x8000};
      REQUIRE(ring.producer.publish(ev, words, sizeof words));
      REQUIRE_THROWS_WITH(reader.drain([](const collect::Record&) {}),
                          Catch::Contains("ownership walk"));
    }
  }
}
