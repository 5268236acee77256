#include <catch2/catch.hpp>

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

TEST_CASE("sizes print for people") {
  REQUIRE(format_bytes(0) == "0 B");
  REQUIRE(format_bytes(1023) == "1023 B");
  REQUIRE(format_bytes(1024) == "1.00 KiB");
  REQUIRE(format_bytes(3u << 20) == "3.00 MiB");
  REQUIRE(format_bytes(12u << 20) == "12.0 MiB");
  REQUIRE(format_bytes(600u << 20) == "600 MiB");
  REQUIRE(format_bytes(uint64_t{3} << 40) == "3.00 TiB");
}
