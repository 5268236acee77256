#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "snapshot/pickle_reader.h"
#include "snapshot/pickle_writer.h"
#include "snapshot/snapshot_json_writer.h"
#include "snapshot/snapshot_reader.h"
#include "support/sample_snapshots.h"

using namespace cumemtrace;
using namespace cumemtrace::snap;
namespace testing = cumemtrace::viz::testing;
using nlohmann::json;

namespace {

std::string from_hex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  return out;
}

}  // namespace

TEST_CASE("unpickling our pickles gives back the JSON writer's document") {
  for (const auto& s :
       {testing::leak_snapshot(), testing::busy_snapshot(3000, 300), snap::Snapshot{}}) {
    const std::string p = to_pickle(s);
    REQUIRE(looks_like_pickle(p));
    // Shared (memoized) frame lists come back filled in, not as the empty list they were when
    // memoized; segment_pool_id tuples come back as lists, as in JSON.
    REQUIRE(unpickle(p) == json::parse(snap::to_json(s)));
  }
}

TEST_CASE("unpickling what Python writes: protocol 2 and 5 headers, framing, floats, tuples") {
  // pickle.dumps({'a': [1, -2, 2**40, 1.5, None, True, (3, 4)], 'b': 'x'}, protocol=5).hex()
  const std::string p5 = from_hex(
      "80059535000000000000007d94288c0161945d94284b014afeffffff8a06000000000001473ff8000000000000"
      "4e884b034b048694658c0162948c017894752e");
  REQUIRE(unpickle(p5) ==
          json::parse(R"({"a": [1, -2, 1099511627776, 1.5, null, true, [3, 4]], "b": "x"})"));
  // pickle.dumps([[1], 2], protocol=2).hex(): MARK/BINPUT/APPEND forms.
  const std::string p2 = from_hex("80025d7100285d71014b01614b02652e");
  REQUIRE(unpickle(p2) == json::parse("[[1], 2]"));
}

TEST_CASE("malformed pickles are errors, never crashes") {
  const std::string good = to_pickle(testing::leak_snapshot());
  // Every truncation fails cleanly.
  for (size_t n = 0; n < good.size(); ++n)
    REQUIRE_THROWS_AS(unpickle(good.substr(0, n)), snap::ReadError);
  // Every single-byte corruption either still parses or fails cleanly.
  size_t failures = 0;
  for (size_t i = 2; i < good.size(); i += 3) {
    std::string bad = good;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    try {
      unpickle(bad);
    } catch (const snap::ReadError&) {
      ++failures;
    }
  }
  REQUIRE(failures > 0);
  REQUIRE_THROWS_WITH(unpickle(std::string("\x80\x04\x63os\nsystem\n", 13)),
                      Catch::Contains("unsupported opcode 0x63"));
  REQUIRE_THROWS_WITH(unpickle(std::string("\x80\x04h\x05.", 5)), Catch::Contains("memo 5 unset"));
  // A list that contains itself (memo 0 fetched into itself) is refused, not followed forever.
  REQUIRE_THROWS_WITH(unpickle(std::string("\x80\x04]\x94h\x00\x61.", 8)),
                      Catch::Contains("cycle"));
  REQUIRE_FALSE(looks_like_pickle("{\"segments\": []}"));
}

namespace {

// An empty list, then `levels` tuples, each holding the one before it twice (memo fetch 'h' of
// the previous, TUPLE2, memoize): each level doubles the size of the unpickled value.
std::string doubling_pickle(int levels) {
  std::string p = "\x80\x04]\x94";
  for (int i = 0; i < levels; ++i) {
    p += 'h';
    p += static_cast<char>(i);
    p += "\x86\x94";
  }
  return p + '.';
}

}  // namespace

TEST_CASE("hostile pickles: deep nesting and exponential sharing are refused cleanly") {
  // 500,000 lists, each appended into the one before it: refused for depth, and freeing the
  // chain must not recurse 500,000 frames deep.
  std::string deep = "\x80\x04";
  deep.append(500000, ']');
  deep.append(499999, 'a');
  deep += '.';
  REQUIRE_THROWS_WITH(unpickle(deep), Catch::Contains("nested deeper than 64"));
  // Each tuple holds the previous one twice (memo fetches): 40 levels would copy 2^40 nodes.
  REQUIRE_THROWS_WITH(unpickle(doubling_pickle(40)), Catch::Contains("more than 16 times"));
  // The same shape 10 levels deep (1,023 copies) is data, and comes back whole.
  const std::string small = doubling_pickle(10);
  json expect = json::array();
  for (int i = 0; i < 10; ++i) expect = json::array({expect, expect});
  REQUIRE(unpickle(small) == expect);
}
