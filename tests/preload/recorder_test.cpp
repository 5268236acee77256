// The preload's recorder in one process, the way the hooks drive it: the first record() starts a
// session over CUMEMTRACE_CONTROL_FD, this test answers the handshake as the collector does and
// drains the ring with the collector's RingReader while eight threads record concurrently. Built
// into the ThreadSanitizer run (scripts/sanitize.sh): the ring, the stack capture, the module map
// and the reader all meet here on real threads.
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "control_protocol.h"
#include "core/emitter.h"
#include "live/control_channel.h"
#include "live/ring_reader.h"
#include "record/recorder.h"

using namespace cumemtrace;

namespace {

// The collector's half of the handshake: Hello with (memfd, liveness socket), answered by Ack.
std::unique_ptr<collect::RingReader> accept_session(int ctl, int& live) {
  alignas(wire::Hello) char msg[wire::kMaxHelloBytes];
  collect::Received got = collect::recv_with_fds(ctl, msg, sizeof msg);
  if (got.bytes < static_cast<ssize_t>(sizeof(wire::Hello)) || got.fds.size() != 2) return nullptr;
  live = got.fds[1];
  auto reader = std::make_unique<collect::RingReader>(got.fds[0]);
  reader->mark_collector(getpid(), wire::kCollectorAttached);
  if (!collect::send_ack(live, 0, "")) return nullptr;
  return reader;
}

constexpr int kThreads = 8;
constexpr uint64_t kPairs = 4000;

uint64_t addr_of(int t, uint64_t i) {
  return (uint64_t{0x7f00} << 32) | (uint64_t(t) << 24) | (i << 8);
}

}  // namespace

TEST_CASE("recorder: concurrent threads through a real session lose and invent nothing") {
  int ctl[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) == 0);
  setenv("CUMEMTRACE_CONTROL_FD", std::to_string(ctl[1]).c_str(), 1);
  setenv("CUMEMTRACE_BUFFER_MB", "1", 1);  // 16,384 slots: wraps many times, producers wait
  setenv("CUMEMTRACE_PYTHON_STACKS", "0", 1);

  // The collector thread: handshake, then drain until told to stop and the ring is empty.
  std::atomic<bool> stop{false};
  std::atomic<bool> attached{false};
  std::map<uint32_t, std::vector<collect::Record>> by_tid;
  std::map<uint32_t, std::string> names;
  uint64_t last_ticket = 0, records = 0, dropped = 0, unpublished = 0;
  bool tickets_ordered = true;
  std::thread collector([&] {
    int live = -1;
    auto reader = accept_session(ctl[0], live);
    if (!reader) return;
    attached = true;
    auto sink = [&](const collect::Record& r) {
      if (records++ && r.ticket <= last_ticket) tickets_ordered = false;
      last_ticket = r.ticket;
      if (r.ev.kind == wire::Kind::kThreadName) names[r.ev.tid] = r.text;
      if (r.ev.kind == wire::Kind::kAlloc || r.ev.kind == wire::Kind::kFree) {
        by_tid[r.ev.tid].push_back(r);
      }
    };
    while (!stop.load()) {
      if (!reader->drain(sink)) std::this_thread::yield();
    }
    reader->drain(sink);
    dropped = reader->dropped();
    unpublished = reader->unpublished_slots();
    // Later records (this process's exit) are dropped at once instead of waiting for space.
    reader->mark_collector(0, wire::kCollectorGone);
    close(live);
  });

  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([t] {
      const std::string name = "worker-" + std::to_string(t);
      prctl(PR_SET_NAME, name.c_str(), 0, 0, 0);
      for (uint64_t i = 0; i < kPairs; ++i) {
        preload::EventArgs a{wire::Kind::kAlloc};
        a.addr = addr_of(t, i);
        a.size = i + 1;
        a.device = -1;
        preload::record(a);
        preload::EventArgs f{wire::Kind::kFree};
        f.addr = a.addr;
        f.device = -1;
        preload::record(f);
      }
    });
  }
  for (auto& w : workers) w.join();
  stop = true;
  collector.join();

  REQUIRE(attached);
  REQUIRE(preload::session_state() == preload::SessionState::kRunning);
  REQUIRE(tickets_ordered);
  REQUIRE(dropped == 0);
  REQUIRE(unpublished == 0);
  REQUIRE(by_tid.size() == kThreads);
  std::map<std::string, int> seen_names;
  for (const auto& [tid, recs] : by_tid) {
    REQUIRE(names.count(tid) == 1);
    const std::string& name = names[tid];
    REQUIRE(name.rfind("worker-", 0) == 0);
    const int t = std::stoi(name.substr(7));
    seen_names[name]++;
    // Exactly alloc(i), free(i) for i in order: nothing lost, nothing invented, nothing swapped.
    REQUIRE(recs.size() == 2 * kPairs);
    bool exact = true, stacks = true;
    for (uint64_t i = 0; i < kPairs; ++i) {
      const auto& a = recs[2 * i];
      const auto& f = recs[2 * i + 1];
      exact &= a.ev.kind == wire::Kind::kAlloc && a.ev.addr == addr_of(t, i) && a.ev.size == i + 1;
      exact &= f.ev.kind == wire::Kind::kFree && f.ev.addr == addr_of(t, i);
      stacks &= !a.frames.empty() && a.frames.size() == a.ev.nframes;
    }
    REQUIRE(exact);
    REQUIRE(stacks);
  }
  REQUIRE(seen_names.size() == kThreads);
  close(ctl[0]);
}

#include "stacks/module_map.h"

// For the ThreadSanitizer run: lookups on the hot path while other threads keep rescanning (each
// address on a fresh page outside every module forces one rescan). A table rewritten under a
// reader is a data race TSan reports. A thread that finds another rescanning does not wait (it
// may be a hook) and does not remember its page as stray, so how many rescans the race leaves
// depends on the scheduler: only its bounds are checked there. What single-threaded notes leave
// is exact: each stray page rescanned once, the newest 64 remembered (no rescan again), older
// ones forgotten (one rescan each), and the program's own code found without a rescan.
TEST_CASE("module map: lookups stay race-free while other threads rescan") {
  const uint64_t known = reinterpret_cast<uint64_t>(&addr_of);
  auto stray = [](uint64_t page) { return 0x10000000000ull + (page << 12); };  // no module there
  preload::modules_note_frames(&known, 1);  // the table holds this program
  const uint32_t gen0 = preload::modules_generation();
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  std::atomic<uint64_t> lookups{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&] {
      started.fetch_add(1);
      while (!stop.load()) {
        preload::modules_note_frames(&known, 1);
        lookups.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::thread rescanner([&] {
    while (started.load() < 3) std::this_thread::yield();  // every reader is looking up
    for (uint64_t page = 1; page <= 200; ++page) {
      const uint64_t ip = stray(page);
      preload::modules_note_frames(&ip, 1);
    }
  });
  rescanner.join();
  stop = true;
  for (auto& t : readers) t.join();
  CHECK(lookups.load() >= 3);
  // The first stray page finds no other rescan (readers rescan only once the table changed); a
  // reader adds one only when its lookup spanned two rescans, never more than one per lookup.
  const uint32_t gen1 = preload::modules_generation();
  CHECK(gen1 - gen0 >= 1);
  CHECK(gen1 - gen0 <= 200 + lookups.load());

  // Alone now: exact counts. Pages 1001..1200 are new, so each is rescanned once.
  for (uint64_t page = 1001; page <= 1200; ++page) {
    const uint64_t ip = stray(page);
    preload::modules_note_frames(&ip, 1);
  }
  const uint32_t gen2 = preload::modules_generation();
  CHECK(gen2 - gen1 == 200);
  preload::modules_note_frames(&known, 1);
  CHECK(preload::modules_generation() == gen2);
  for (uint64_t page = 1200 - 63; page <= 1200; ++page) {  // the newest 64: remembered as stray
    const uint64_t ip = stray(page);
    preload::modules_note_frames(&ip, 1);
  }
  CHECK(preload::modules_generation() == gen2);
  const uint64_t old_page = stray(1001);  // long since pushed out of the 64 remembered
  preload::modules_note_frames(&old_page, 1);
  CHECK(preload::modules_generation() == gen2 + 1);
}
