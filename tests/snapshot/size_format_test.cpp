#include <catch2/catch.hpp>

#include <fstream>
#include <string>

#include "snapshot/size_format.h"

using cumemtrace::snap::format_bytes;
using cumemtrace::snap::parse_bytes;

TEST_CASE("sizes parse in every documented form") {
  REQUIRE(parse_bytes("0") == 0u);
  REQUIRE(parse_bytes("1048576") == 1048576u);
  REQUIRE(parse_bytes("12MiB") == 12u << 20);
  REQUIRE(parse_bytes("12 mib") == 12u << 20);
  REQUIRE(parse_bytes("1.5GiB") == 1610612736u);
  REQUIRE(parse_bytes("1.5GB") == 1500000000u);
  REQUIRE(parse_bytes("4k") == 4096u);
  REQUIRE(parse_bytes("2KB") == 2000u);
  REQUIRE(parse_bytes("18446744073709551615") == UINT64_MAX);
}

TEST_CASE("bad sizes are refused") {
  for (const char* bad :
       {"", "-1", "12XB", "1.2.3", "abc", "12 MiB x", "18446744073709551616", "99999999999TB"}) {
    INFO(bad);
    REQUIRE_FALSE(parse_bytes(bad).has_value());
  }
}

TEST_CASE("sizes print for people by the one rule every printer shares") {
  // The cases the HTML page and the pytest plugin are held to as well (size_format_cases.txt).
  std::ifstream in(CUMEMTRACE_FIXTURES "/size_format_cases.txt");
  REQUIRE(in);
  int cases = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto tab = line.find('\t');
    REQUIRE(tab != std::string::npos);
    const uint64_t bytes = std::stoull(line.substr(0, tab));
    INFO(line);
    REQUIRE(format_bytes(bytes) == line.substr(tab + 1));
    ++cases;
  }
  REQUIRE(cases == 25);
}
