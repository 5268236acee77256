// Reader tests: exact round trip of the writer's format, the real PyTorch fixture, and one-line
// errors (file, offset, what was expected) for malformed input of every kind.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>

#include "io/snapshot_input.h"
#include "snapshot/snapshot_json_writer.h"
#include "support/snapshot_builder.h"
#include "support/torch_fixture.h"

using namespace cumemtrace;

namespace {

snap::Snapshot full_snapshot() {
  testing::SnapshotBuilder b(2);
  const auto s1 = b.site("allocate_weights", "tests/programs/scenarios.cpp", 42);
  const auto s2 = b.site("scratch \"quoted\"\tname", "dir with space/x.cu", 7);
  b.alloc(0x1000, 4096, s1);
  b.alloc(0x2000, 1 << 20, s2, 1);
  b.free(0x1000);
  b.mark("step");
  b.anomaly("double_free", 0x1000, s2);
  auto s = b.finish();
  auto& t = *s.tool;
  t.rank = {{"RANK", "1"}, {"WORLD_SIZE", "2"}};
  t.threads = {{"7", "main"}, {"8", "worker \xc3\xa9"}};
  t.devices = {{0, 4096, 1000010, 0, 1, 1}, {1, 1 << 20, 1000020, 1 << 20, 1, 0, 2 << 20, 4 << 20}};
  t.vmm_handles.push_back({0xabc, 2 << 20, 0, s1, 1000030});
  t.imported_mappings.push_back({0x7000000, 2 << 20, 1, 0xabd, s2, 1000035});
  t.host_allocations.push_back({0x7f00, 512, "cudaHostAlloc", s2, 1000040});
  t.contexts = {{0, 524288, 1000001, 0, "cuDevicePrimaryCtxRetain", 0xc0},
                {1, 1 << 20, 1000002, 1000045, "cuCtxCreate", 0xc1}};
  t.ended = {"signal", 0, 11};
  t.reason = "signal";
  t.ring_error = "corrupt ring from pid 7: record 9 claims 200 continuation slots";
  t.time_resolution_ns = 1'000'000;
  s.device_traces[0].push_back({snap::Action::kOom, 0, 1 << 30, 0, 1000050, s1, 12345, 7});
  s.device_traces[1].push_back({snap::Action::kSegmentMap, 0x9000, 8192, 3, 1000060, s1, 0, 0});
  s.device_traces[1].back().stream_per_thread = true;
  s.device_traces[1].push_back({snap::Action::kSegmentAlloc, 0xa000, 512, 3, 1000061, s2, 0, 0});
  s.device_traces[1].back().source = snap::Source::kGraph;
  s.segments.back().source = snap::Source::kGraph;
  s.allocator_settings = {{"expandable_segments", "False"}};
  s.annotations.push_back({"epoch", "START", 1, 1000070});
  return s;
}

std::string error_of(const std::string& text) {
  try {
    snap::read_snapshot(text, "in.json");
  } catch (const snap::ReadError& e) {
    return e.what();
  }
  return "(no error)";
}

const std::string& kFixture = testing::kTorchLast1500;

}  // namespace

TEST_CASE("reader round-trips everything the writer writes", "[reader]") {
  const auto s = full_snapshot();
  const std::string text = snap::to_json(s);
  const auto r = snap::read_snapshot(text, "rt.json");
  CHECK(snap::to_json(r) == text);
  REQUIRE(r.tool);
  CHECK(r.tool->threads.at("8") == "worker \xc3\xa9");
  CHECK(r.tool->ended.signal == 11);
  CHECK(r.tool->ring_error == s.tool->ring_error);
  CHECK(r.tool->time_resolution_ns == 1'000'000);
  CHECK(r.device_traces.size() == 2);
  CHECK(r.device_traces[0].back().action == snap::Action::kOom);
  CHECK(r.device_traces[0].back().device_free == 12345);
  CHECK(r.device_traces[0][0].tid == 7);
  const auto& mapped = r.device_traces[1][r.device_traces[1].size() - 2];  // the segment_map
  CHECK(mapped.stream_per_thread);
  CHECK(r.stacks.size() == s.stacks.size());
  REQUIRE(r.tool->imported_mappings.size() == 1);
  CHECK(r.tool->imported_mappings[0].handle == 0xabd);
  CHECK(r.tool->imported_mappings[0].stack == r.tool->host_allocations[0].stack);
  CHECK(mapped.stack == r.tool->vmm_handles[0].stack);
  // CUDA graph memory: its source on entries and segments, the driver's graph pool per device.
  CHECK(r.device_traces[1].back().source == snap::Source::kGraph);
  CHECK(r.segments.back().source == snap::Source::kGraph);
  CHECK(r.tool->devices[1].graph_reserved_bytes == (2u << 20));
  CHECK(r.tool->devices[1].graph_reserved_peak_bytes == (4u << 20));
  CHECK(r.tool->devices[0].graph_reserved_peak_bytes == 0);
  CHECK(text.find("\"source\":\"graph\"") != std::string::npos);
  REQUIRE(r.tool->contexts.size() == 2);
  CHECK(r.tool->contexts[0].bytes == 524288);
  CHECK(r.tool->contexts[0].end_time_us == 0);
  CHECK(r.tool->contexts[1].api == "cuCtxCreate");
  CHECK(r.tool->contexts[1].end_time_us == 1000045);
}

TEST_CASE("contexts: bad values are rejected with one line naming the field", "[reader]") {
  const std::string text = snap::to_json(full_snapshot());
  const std::string first =
      R"({"device":0,"bytes":524288,"time_us":1000001,"api":"cuDevicePrimaryCtxRetain","handle":192})";
  REQUIRE(text.find(first) != std::string::npos);
  auto with = [&](const std::string& replacement) {
    std::string t = text;
    t.replace(t.find(first), first.size(), replacement);
    return t;
  };
  struct Case {
    std::string context;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {R"({"device":0,"bytes":-1,"time_us":1,"api":"cuCtxCreate","handle":1})",
       "expected a non-negative integer at cumemtrace.contexts[0].bytes"},
      {R"({"device":0,"bytes":"1","time_us":1,"api":"cuCtxCreate","handle":1})",
       "expected a non-negative integer at cumemtrace.contexts[0].bytes"},
      {R"({"device":0,"bytes":1,"time_us":1,"api":"cuCtxPushCurrent","handle":1})",
       "expected api \"cuDevicePrimaryCtxRetain\" or \"cuCtxCreate\" at "
       "cumemtrace.contexts[0].api"},
      {R"({"device":0,"bytes":1,"time_us":1,"api":"cuCtxCreate"})",
       "expected key \"handle\" at cumemtrace.contexts[0]"},
      {R"({"device":0,"bytes":1,"time_us":5,"end_time_us":4,"api":"cuCtxCreate","handle":1})",
       "a context ends before it begins at contexts[0]"},
      {R"({"device":0,"bytes":1,"time_us":5,"end_time_us":0,"api":"cuCtxCreate","handle":1})",
       "expected a positive end time at cumemtrace.contexts[0].end_time_us"},
      {R"({"device":5000,"bytes":1,"time_us":5,"api":"cuCtxCreate","handle":1})",
       "expected a device ordinal below 4096"},
      {"7", "expected an object at cumemtrace.contexts[0]"},
  };
  for (const auto& c : cases) {
    INFO(c.context);
    const std::string bad = with(c.context);
    CHECK_THROWS_AS(snap::read_snapshot_reference(bad, "in.json"), snap::ReadError);
    const std::string e = error_of(bad);
    CHECK(e.find(c.expect) != std::string::npos);
    CHECK(e.rfind("in.json:offset ", 0) == 0);
  }
  // The list itself must be an array.
  std::string t = text;
  const auto at = t.find("\"contexts\":[");
  REQUIRE(at != std::string::npos);
  t.replace(at, 12, "\"contexts\":7,\"x\":[");
  CHECK(error_of(t).find("expected an array at cumemtrace.contexts") != std::string::npos);
}

TEST_CASE("identical frame lists are interned once", "[reader]") {
  testing::SnapshotBuilder b;
  const auto st = b.site("f", "a.cpp", 1);
  for (uint64_t i = 0; i < 50; ++i) b.alloc(0x1000 * (i + 1), 64, st);
  const auto r = snap::read_snapshot(snap::to_json(b.finish()), "x");
  CHECK(r.stacks.size() == 1);
  CHECK(r.segments.size() == 50);
  for (const auto& g : r.segments) CHECK(g.blocks.at(0).stack == 0);
}

TEST_CASE("reads PyTorch's own snapshot", "[reader][torch]") {
  const auto& facts = testing::torch_facts();
  const auto s = snap::read_snapshot_any(kFixture);
  CHECK_FALSE(s.tool);
  CHECK(s.segments.size() == facts["segments"].get<size_t>());
  REQUIRE(s.device_traces.size() == 1);
  CHECK(s.device_traces[0].size() == 1500);
  // Every entry kept, each with its action: PyTorch's own count per kind.
  std::map<std::string, size_t> actions;
  for (const auto& e : s.device_traces[0]) ++actions[std::string(snap::action_name(e.action))];
  CHECK(nlohmann::json(actions) == facts["last1500_actions"]);
  CHECK(s.device_traces[0].back().action == snap::Action::kSegmentFree);
  CHECK(s.annotations.size() == 240);  // record.py's 60 steps x (zero_grad, step) START/END
  CHECK(s.allocator_settings.at("expandable_segments") == "false");
  CHECK(s.allocator_settings.at("max_split_size") == "-1");
  // Nested settings are kept as their JSON text.
  CHECK(s.allocator_settings.at("roundup_power2_divisions").rfind("{\"1\":0,", 0) == 0);
  size_t with_frames = 0;
  for (const auto& e : s.device_traces[0]) with_frames += e.stack != snap::kNoStack;
  CHECK(with_frames == 1500);
  CHECK(s.stacks.size() < with_frames);  // interned
  // A torch snapshot re-written by cumemtrace reads back identically.
  const auto text = snap::to_json(s);
  CHECK(snap::to_json(snap::read_snapshot(text, "again")) == text);
}

TEST_CASE("malformed input gives one-line errors with file, offset and expectation", "[reader]") {
  const std::string ok_entry =
      R"({"action":"alloc","addr":1,"size":2,"stream":0,"time_us":3,"frames":[]})";
  auto traces = [&](const std::string& entry) {
    return R"({"segments":[],"device_traces":[[)" + entry + "]]}";
  };
  struct Case {
    std::string text;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"", "invalid JSON"},
      {"[]", "expected a JSON object at top level"},
      {"{", "invalid JSON"},
      {"{\"segments\":[]", "invalid JSON"},
      {"\x7f"
       "ELF\x01\x02",
       "invalid JSON"},
      {R"({"segments":{},"device_traces":[]})", "expected an array at segments"},
      {R"({"segments":[]})", "expected key \"device_traces\" at top level"},
      {R"({"segments":[],"device_traces":[{}]})", "expected an array at device_traces[0]"},
      {traces(R"({"action":"alloc","addr":1,"size":-2})"),
       "expected a non-negative integer at device_traces[0][0].size"},
      {traces(R"({"action":"alloc","addr":1,"size":2.5})"), "expected a non-negative integer"},
      {traces(R"({"action":"alloc","addr":9007199254740992,"size":2})"),
       "expected an integer at most 2^53-1"},
      {traces(R"({"action":"allocate","addr":1,"size":2})"),
       "expected a known action, not \"allocate\""},
      {traces(R"({"action":"alloc","size":2})"), "expected key \"addr\""},
      {traces(R"({"action":"oom","size":2})"), "expected key \"device_free\" on an oom entry"},
      {traces(R"({"action":1,"addr":1,"size":2})"), "expected a string"},
      {traces(R"({"action":"alloc","addr":1,"size":2,"frames":[{"filename":"a","line":1}]})"),
       "expected key \"name\""},
      {traces(R"({"action":"alloc","addr":1,"size":2,"frames":{}})"), "expected an array"},
      {traces(
           R"({"action":"alloc","addr":1,"size":2,"frames":[{"filename":"a","line":-1,"name":"f"}]})"),
       "offset 104: expected a non-negative line number at device_traces[0][0].frames[0].line"},
      {R"({"segments":[{"device":0,"address":1,"total_size":1,"blocks":[{"address":1,"size":1,"state":"gone"}]}],"device_traces":[]})",
       "expected state active_allocated, active_pending_free or inactive"},
      {R"({"segments":[{"device":99999,"address":1,"total_size":1,"blocks":[]}],"device_traces":[]})",
       "expected a device ordinal below 4096"},
      {R"({"segments":[],"device_traces":[],"external_annotations":[{"name":"a","stage":"BEGIN","device":0,"time_us":1}]})",
       "expected stage START, END or MARK"},
      {R"({"segments":[],"device_traces":[],"cumemtrace":{"schema_version":2}})",
       "in.json:offset 66: unsupported schema_version 2 (this cumemtrace reads 1)"},
      {R"({"segments":[],"device_traces":[],"cumemtrace":{"schema_version":1}})",
       "expected key \"tool_version\" at cumemtrace"},
      {R"({"segments":[],"device_traces":[],"x":)" + std::string(100000, '[') +
           std::string(100000, ']') + "}",
       "expected JSON nested at most 512 levels deep"},
      {"{\"segments\":[],\"device_traces\":[],\"a\":\"\xff\xfe\"}", "invalid JSON"},
      // "rank" as the first level three deep grows the reader's stack there (found by
      // fuzz_snapshot_reader: a use-after-free under ASan before the fix).
      {R"({"segments":[],"device_traces":[],"cumemtrace":{"rank":{"RANK":"1"}}})",
       "expected key \"schema_version\" at cumemtrace"},
      // A NUL byte after the value: nlohmann's lexer reads NUL as the end of the input, so the
      // reference accepted what the scanner rejects (found by fuzz_snapshot_reader).
      {std::string(R"({"segments":[],"device_traces":[[]]})") + std::string(3, '\0') + ",\"x\":{}}",
       "expected the end of the input after the top-level value"},
  };
  for (const auto& c : cases) {
    INFO(c.text.substr(0, 200));
    // The nlohmann-driven reference reader rejects the same inputs.
    CHECK_THROWS_AS(snap::read_snapshot_reference(c.text, "in.json"), snap::ReadError);
    const std::string e = error_of(c.text);
    CHECK(e.find(c.expect) != std::string::npos);
    CHECK(e.rfind("in.json:offset ", 0) == 0);
    CHECK(e.find('\n') == std::string::npos);
  }
  CHECK(error_of(traces(ok_entry)) == "(no error)");
}

TEST_CASE("unknown keys are skipped, whatever they hold", "[reader]") {
  const auto s = snap::read_snapshot(
      R"({"new_field":{"deep":[1,[2,{"x":null}]]},"segments":[],"device_traces":[[{"action":"free_completed","addr":1,"size":2,"stream":0,"time_us":3,"compile_context":"N/A","user_metadata":{"a":[1]}}]]})",
      "x");
  REQUIRE(s.device_traces.at(0).size() == 1);
  CHECK(s.device_traces[0][0].action == snap::Action::kFreeCompleted);
}

TEST_CASE("every truncation of a valid snapshot is rejected without crashing", "[reader]") {
  const std::string text = snap::to_json(full_snapshot());
  for (size_t n = 0; n + 1 < text.size(); n += 7) {
    INFO(n);
    // The text ends in "}\n": any strictly shorter prefix misses the closing brace.
    CHECK_THROWS_AS(snap::read_snapshot(std::string_view(text).substr(0, n), "t"), snap::ReadError);
  }
}

TEST_CASE("file errors name the file", "[reader]") {
  const auto dir = std::filesystem::temp_directory_path();
  try {
    snap::read_snapshot_any((dir / "does-not-exist.json").string());
    FAIL("no error");
  } catch (const snap::ReadError& e) {
    CHECK(std::string(e.what()).find("does-not-exist.json: cannot open") != std::string::npos);
  }
  CHECK_THROWS_WITH(snap::read_snapshot_any(dir.string()),
                    Catch::Contains("expected a regular file"));
  const auto empty = dir / "cumemtrace-empty-test.json";
  { std::ofstream(empty.string()); }
  CHECK_THROWS_WITH(snap::read_snapshot_any(empty.string()), Catch::Contains("offset 0"));
  std::filesystem::remove(empty);
}

TEST_CASE("the fast scanner and the nlohmann reference agree on JSON edge cases", "[reader]") {
  auto wrap = [](const std::string& v) {
    return R"({"segments":[],"device_traces":[],"allocator_settings":{"k":)" + v + "}}";
  };
  const std::vector<std::string> values = {"0",
                                           "-0",
                                           "1.5",
                                           "-1.5e3",
                                           "1E+2",
                                           "18446744073709551615",
                                           "18446744073709551616",
                                           "-9223372036854775808",
                                           "-9223372036854775809",
                                           "01",
                                           "1.",
                                           ".5",
                                           "-",
                                           "1e",
                                           "+1",
                                           "\"\\u00e9\\ud83d\\ude00\"",
                                           "\"\\ud83d\"",
                                           "\"\\ude00\"",
                                           "\"\\ud83dx\"",
                                           "\"\\x\"",
                                           "\"\xc3\xa9\"",
                                           "\"\xc3\"",
                                           "\"\xe0\x80\x80\"",
                                           "\"\xed\xa0\x80\"",
                                           "\"\xf4\x90\x80\x80\"",
                                           "\"\xf0\x9f\x98\x80\"",
                                           "\"a\tb\"",
                                           "\"\\/\\b\\f\\n\\r\\t\"",
                                           "true",
                                           "tru",
                                           "nul",
                                           "[1,]",
                                           "[1 2]",
                                           "{\"a\":1,}",
                                           "{\"a\" 1}",
                                           "{1:2}",
                                           "[[[]]]",
                                           "{\"a\":{\"b\":[null,false]}}",
                                           "1 ",
                                           "\"\\u0000\""};
  for (const auto& v : values) {
    for (const std::string& text :
         {wrap(v), "\xef\xbb\xbf" + wrap(v), wrap(v) + " x", wrap(v) + "\n"}) {
      INFO(text);
      std::string fast, ref;
      try {
        fast = snap::to_json(snap::read_snapshot(text, "f"));
      } catch (const snap::ReadError& e) {
        fast = std::string("error: ") + e.what();
      }
      try {
        ref = snap::to_json(snap::read_snapshot_reference(text, "f"));
      } catch (const snap::ReadError& e) {
        ref = std::string("error: ") + e.what();
      }
      CHECK((fast.rfind("error", 0) == 0) == (ref.rfind("error", 0) == 0));
      if (fast.rfind("error", 0) != 0) CHECK(fast == ref);
    }
  }
  std::ifstream in(kFixture);
  REQUIRE(in);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(snap::to_json(snap::read_snapshot(text, "a")) ==
        snap::to_json(snap::read_snapshot_reference(text, "b")));
}
