#include <catch2/catch.hpp>

#include "snapshot/utf8.h"

using namespace cumemtrace::snap;

TEST_CASE("UTF-8 validation and repair") {
  REQUIRE(valid_utf8("plain"));
  REQUIRE(valid_utf8("\xc3\xa9\xe2\x86\x92\xf0\x9f\x98\x80"));
  REQUIRE_FALSE(valid_utf8("\xff"));
  REQUIRE_FALSE(valid_utf8("\xc0\xaf"));      // overlong '/'
  REQUIRE_FALSE(valid_utf8("\xed\xa0\x80"));  // surrogate
  REQUIRE_FALSE(valid_utf8("\xe2\x86"));      // truncated
  REQUIRE(to_valid_utf8("a\xffz") == "a\xef\xbf\xbdz");
}

TEST_CASE("JSON strings are escaped for a <script> element") {
  std::string out;
  append_json_string(out, "a\"b\\c\n</x>\x01");
  REQUIRE(out == "\"a\\\"b\\\\c\\n<\\/x>\\u0001\"");
}
