// libFuzzer target for the suppressions reader and its pattern matcher: any file either parses or
// throws SuppressionError with a one-line "NAME:LINE: expected ..." message, and matching any
// parsed pattern against any text terminates without sanitizer findings.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "verdicts/suppressions.h"

using namespace cumemtrace::analysis;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<Suppression> rules;
  try {
    rules = parse_suppressions(text, "fuzz.supp");
  } catch (const SuppressionError& e) {
    const std::string_view m = e.what();
    if (m.rfind("fuzz.supp:", 0) != 0 || m.find('\n') != std::string_view::npos) __builtin_trap();
    return 0;
  }
  // Match every rule against the input itself and its halves: adversarial texts for the globs.
  for (const auto& r : rules) {
    (void)pattern_matches(r.pattern, text);
    (void)pattern_matches(r.pattern, text.substr(size / 2));
    if (!pattern_matches(r.pattern, r.pattern) &&
        r.pattern.find_first_of("*^$") == std::string::npos)
      __builtin_trap();  // a plain pattern always matches itself
  }
  return 0;
}
