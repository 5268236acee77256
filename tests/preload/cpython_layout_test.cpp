// The CPython layout selection (preload/stacks/cpython_layout.cpp): which versions get a layout,
// how version strings parse, and the 3.13+ layouts taken from _Py_DebugOffsets, here as Debian's
// 3.13.5 and 3.14.10 publish them (words dumped from their _PyRuntime), then damaged.
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <vector>

#include "stacks/cpython_layout.h"

using namespace cumemtrace::preload;

namespace {

// A _Py_DebugOffsets image: cookie, version, then the given words at their byte offsets.
std::vector<unsigned char> debug_offsets(unsigned long version,
                                         const std::map<unsigned, uint64_t>& words) {
  std::vector<unsigned char> b(1024, 0);
  std::memcpy(b.data(), "xdebugpy", 8);
  const uint64_t v = version;
  std::memcpy(b.data() + 8, &v, 8);
  for (auto [at, w] : words) std::memcpy(b.data() + at, &w, 8);
  return b;
}

// Debian trixie's 3.13.5 and sid's 3.14.10: the words the reader uses.
const std::map<unsigned, uint64_t> k313Words{{184, 72},  {224, 80},  {232, 8},   {240, 0},
                                             {248, 56},  {264, 70},  {272, 208}, {280, 112},
                                             {296, 128}, {304, 136}, {312, 68},  {344, 200}};
const std::map<unsigned, uint64_t> k314Words{
    {208, 72},  {248, 88},  {256, 8},   {264, 0},  {272, 56},  {288, 74}, {312, 216},
    {320, 112}, {336, 128}, {344, 136}, {352, 68}, {384, 208}, {640, 40}};

}  // namespace

TEST_CASE("CPython versions: 3.9 to 3.14 releases and candidates have a layout") {
  CpythonLayout L{};
  for (unsigned long v : {0x030902f0ul, 0x030a0cf0ul, 0x030b02f0ul, 0x030c03c1ul}) {
    INFO(std::hex << v);
    REQUIRE(cpython_layout(v, nullptr, &L) == LayoutVerdict::kKnown);
    REQUIRE(L.minor == ((v >> 16) & 0xff));
  }
  REQUIRE(cpython_layout(0x030902f0, nullptr, &L) == LayoutVerdict::kKnown);
  REQUIRE(L.model == FrameModel::kFrameObject);
  REQUIRE(L.frame_instr == 104);
  for (unsigned long v : {0x030812f0ul, 0x030f00f0ul, 0x030c00b3ul, 0x030d00a1ul, 0x020712f0ul}) {
    INFO(std::hex << v);
    REQUIRE(cpython_layout(v, nullptr, &L) == LayoutVerdict::kUnknownVersion);
  }
}

TEST_CASE("Py_GetVersion strings parse to PY_VERSION_HEX") {
  REQUIRE(parse_python_version("3.9.2 (default, Mar 12 2021, 04:06:34) \n[GCC 10.2.1]") ==
          0x030902f0ul);
  REQUIRE(parse_python_version("3.10.12 (main, Nov 20 2023)") == 0x030a0cf0ul);
  REQUIRE(parse_python_version("3.10.0rc2 (default)") == 0x030a00c2ul);
  REQUIRE(parse_python_version("3.11.0b4+ (heads/3.11)") == 0x030b00b4ul);
  REQUIRE(parse_python_version("3.10.1") == 0x030a01f0ul);
  for (const char* bad : std::initializer_list<const char*>{"", "3", "3.10", "3.10.x", "x3.10.1",
                                                            "3.10.1c1", "3.300.1", nullptr}) {
    INFO((bad ? bad : "null"));
    REQUIRE(parse_python_version(bad) == 0);
  }
}

TEST_CASE("3.13 and 3.14 layouts come from _Py_DebugOffsets") {
  CpythonLayout L{};
  auto b313 = debug_offsets(0x030d05f0, k313Words);
  REQUIRE(cpython_layout(0x030d05f0, b313.data(), &L) == LayoutVerdict::kKnown);
  REQUIRE(L.model == FrameModel::kCurrentFrame);
  REQUIRE(L.tstate_frame == 72);
  REQUIRE(L.frame_owner == 70);
  REQUIRE(L.code_name == 128);  // co_qualname
  REQUIRE(L.code_bytecode == 200);
  REQUIRE(L.code_linetable == 136);
  REQUIRE(L.code_firstlineno == 68);
  REQUIRE(L.max_owner == 3);
  REQUIRE_FALSE(L.executable_tagged);

  auto b314 = debug_offsets(0x030e0af0, k314Words);
  REQUIRE(cpython_layout(0x030e0af0, b314.data(), &L) == LayoutVerdict::kKnown);
  REQUIRE(L.frame_owner == 74);
  REQUIRE(L.code_bytecode == 208);
  REQUIRE(L.code_linetable == 136);
  REQUIRE(L.code_firstlineno == 68);
  REQUIRE(L.max_owner == 4);
  REQUIRE(L.owner_not_python == 3);
  REQUIRE(L.executable_tagged);
}

TEST_CASE("3.13+ without sound _Py_DebugOffsets, or free-threaded, gets no layout") {
  CpythonLayout L{};
  REQUIRE(cpython_layout(0x030e0af0, nullptr, &L) == LayoutVerdict::kBadDebugOffsets);
  auto b = debug_offsets(0x030e0af0, k314Words);
  REQUIRE(cpython_layout(0x030e0bf0, b.data(), &L) == LayoutVerdict::kBadDebugOffsets);  // version
  auto ft = b;
  ft[16] = 1;  // free_threaded
  REQUIRE(cpython_layout(0x030e0af0, ft.data(), &L) == LayoutVerdict::kFreeThreaded);
  auto cookie = b;
  cookie[0] = 'y';
  REQUIRE(cpython_layout(0x030e0af0, cookie.data(), &L) == LayoutVerdict::kBadDebugOffsets);
  auto outside = b;
  outside[288] = 90;  // owner beyond sizeof(_PyInterpreterFrame)
  REQUIRE(cpython_layout(0x030e0af0, outside.data(), &L) == LayoutVerdict::kBadDebugOffsets);
  // 3.14's positions on a 3.13 image: its sizes read as 0, so nothing fits.
  auto b313 = debug_offsets(0x030e0af0, k313Words);
  REQUIRE(cpython_layout(0x030e0af0, b313.data(), &L) == LayoutVerdict::kBadDebugOffsets);
}
