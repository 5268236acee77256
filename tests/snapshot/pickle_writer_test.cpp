#include <catch2/catch.hpp>

#include <map>
#include <set>
#include <stdexcept>

#include "snapshot/pickle_writer.h"
#include "support/sample_snapshots.h"

using namespace cumemtrace;
using namespace cumemtrace::snap;
namespace testing = cumemtrace::viz::testing;

namespace {

// Walks a pickle opcode by opcode, as MemoryViz.js's unpickler would, failing on any opcode
// outside torch-snapshot-format.md §3.2; records the largest MARK...APPENDS/SETITEMS batch.
struct Scan {
  std::map<unsigned char, size_t> ops;
  size_t largest_batch = 0;
  size_t max_depth = 0;
};

Scan scan(const std::string& p) {
  Scan s;
  std::vector<size_t> marks;  // stack depth at each MARK
  size_t depth = 0;           // items on the value stack
  size_t i = 0;
  auto u = [&](size_t n) {
    uint64_t v = 0;
    for (size_t k = 0; k < n; ++k)
      v |= uint64_t{static_cast<unsigned char>(p.at(i + k))} << (8 * k);
    i += n;
    return v;
  };
  auto pop_mark = [&] {
    REQUIRE(!marks.empty());
    const size_t items = depth - marks.back();
    s.largest_batch = std::max(s.largest_batch, items);
    depth = marks.back();
    marks.pop_back();
    return items;
  };
  while (true) {
    const auto op = static_cast<unsigned char>(p.at(i++));
    s.ops[op]++;
    switch (op) {
      case 0x80:
        REQUIRE(u(1) == 4);
        break;
      case '.':
        REQUIRE(i == p.size());
        REQUIRE(depth == 1);
        return s;
      case '(':
        marks.push_back(depth);
        break;
      case '}':
      case ']':
      case 0x88:
      case 0x89:
        ++depth;
        break;
      case 'u':
        pop_mark();
        break;
      case 'e':
        pop_mark();
        break;
      case 'a':
        REQUIRE(depth >= 2);
        --depth;
        break;
      case 0x86:
        REQUIRE(depth >= 2);
        --depth;
        break;
      case 'K':
        u(1);
        ++depth;
        break;
      case 'M':
        u(2);
        ++depth;
        break;
      case 'J':
        u(4);
        ++depth;
        break;
      case 0x8a: {
        const auto n = u(1);
        REQUIRE(n <= 9);
        i += n;
        ++depth;
        break;
      }
      case 0x8c: {
        const auto n = u(1);
        i += n;
        ++depth;
        break;
      }
      case 'X': {
        const auto n = u(4);
        i += n;
        ++depth;
        break;
      }
      case 0x94:
        REQUIRE(depth >= 1);
        break;
      case 'h':
        u(1);
        ++depth;
        break;
      case 'j':
        u(4);
        ++depth;
        break;
      default:
        FAIL("opcode outside the MemoryViz.js set: " << static_cast<int>(op) << " at " << i - 1);
    }
    s.max_depth = std::max(s.max_depth, depth);
  }
}

size_t count(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = hay.find(needle); pos != std::string::npos; pos = hay.find(needle, pos + 1))
    ++n;
  return n;
}

}  // namespace

TEST_CASE("pickle of the leak snapshot: header, opcodes, integers") {
  const std::string p = to_pickle(testing::leak_snapshot());
  REQUIRE(p.substr(0, 2) == std::string("\x80\x04", 2));
  REQUIRE(p.back() == '.');
  const Scan s = scan(p);
  REQUIRE(s.ops.count(0x86) == 1);  // one segment_pool_id tuple
  // 0x7f0000100000 as LONG1: 6 bytes little endian.
  REQUIRE(p.find(std::string("\x8a\x06\x00\x00\x10\x00\x00\x7f", 8)) != std::string::npos);
  // 1 MiB = 0x100000 fits BININT (4 bytes).
  REQUIRE(p.find(std::string("J\x00\x00\x10\x00", 5)) != std::string::npos);
  // Key strings are written once and fetched from the memo after that.
  REQUIRE(count(p, "time_us") == 1);
}

TEST_CASE("pickle batches lists of more than 1000 items and memoizes shared stacks") {
  const auto snapshot = testing::busy_snapshot(5000, 300);
  const std::string p = to_pickle(snapshot);
  const Scan s = scan(p);
  REQUIRE(s.largest_batch == kPickleBatch);
  // 2500 allocations per device, 5 entries each: 12,500 entries, so 13 APPENDS per device.
  REQUIRE(s.ops.at('e') >= 26);
  // Each stack is written once, then fetched from the memo: its function name appears once.
  REQUIRE(count(p, std::string("\x8c\x07layer_3", 9)) == 1);
  // Past 256 memo entries, fetches use LONG_BINGET.
  REQUIRE(s.ops.count('h') > 0);
  REQUIRE(s.ops.count('j') > 0);
}

TEST_CASE("pickle integers at the edges of each opcode") {
  snap::Snapshot snapshot;
  auto& t = snapshot.device_traces.emplace_back();
  for (uint64_t v : {uint64_t{0}, uint64_t{255}, uint64_t{256}, uint64_t{65535}, uint64_t{65536},
                     uint64_t{0x7fffffff}, uint64_t{0x80000000}, uint64_t{0x8000000000},
                     uint64_t{0xffffffffffffffff}})
    t.push_back({snap::Action::kFreeCompleted, v, 1, 0, -5, -1, 0, 0});
  const std::string p = to_pickle(snapshot);
  scan(p);
  REQUIRE(p.find(std::string("M\xff\xff", 3)) != std::string::npos);
  REQUIRE(p.find(std::string("J\xff\xff\xff\x7f", 5)) != std::string::npos);
  // 2^31 needs a fifth byte to stay positive.
  REQUIRE(p.find(std::string("\x8a\x05\x00\x00\x00\x80\x00", 7)) != std::string::npos);
  REQUIRE(p.find(std::string("\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00", 11)) !=
          std::string::npos);
  // -5 as BININT.
  REQUIRE(p.find(std::string("J\xfb\xff\xff\xff", 5)) != std::string::npos);
}

TEST_CASE("pickle repairs invalid UTF-8 instead of writing what Python cannot decode") {
  snap::Snapshot snapshot;
  snapshot.stacks = {{{"bad\xff.so", 1, "f\xc3"}}};
  auto& t = snapshot.device_traces.emplace_back();
  t.push_back({snap::Action::kAlloc, 16, 1, 0, 1, 0, 0, 0});
  const std::string p = to_pickle(snapshot);
  scan(p);
  REQUIRE(p.find("bad\xef\xbf\xbd.so") != std::string::npos);
  REQUIRE(p.find("f\xef\xbf\xbd") != std::string::npos);
}
