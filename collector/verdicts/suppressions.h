// Contract: suppression files, LeakSanitizer-style. One rule per line, `TYPE:PATTERN`; `#` starts
// a comment; blank lines are ignored. TYPE is `leak` (the allocation does not count as leaked)
// or `growth` (its bytes do not count towards --max-growth). PATTERN is matched against the
// function name and the file name of every frame of the allocation's stack; `*` matches any run
// of characters, a leading `^` / trailing `$` anchor the match, otherwise it matches anywhere
// (as in LSan). A rule with no frames to match never applies. parse errors are one line:
// "FILE:LINE: expected ...". Documented for users in docs/suppressions.md.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

enum class SuppressionType { kLeak, kGrowth };

struct Suppression {
  SuppressionType type = SuppressionType::kLeak;
  std::string pattern;  // as written, anchors included
  std::string source;   // "FILE:LINE", for the "suppressions used" list
  // Filled in while checking:
  mutable uint64_t hits = 0;
  mutable uint64_t bytes = 0;
};

class SuppressionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::vector<Suppression> parse_suppressions(std::string_view text, const std::string& name);
std::vector<Suppression> load_suppressions(const std::string& path);

// LSan-style pattern match against one string.
bool pattern_matches(std::string_view pattern, std::string_view text);

// The first rule of `type` matching any frame of `stack`, or nullptr.
const Suppression* find_suppression(const std::vector<Suppression>& rules, SuppressionType type,
                                    const snap::Snapshot& s, int32_t stack);

}  // namespace cumemtrace::analysis
