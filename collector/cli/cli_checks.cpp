#include "cli/cli_checks.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>

#include "cli/log.h"

namespace cumemtrace::cli {

CLI::Validator between(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long n = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end || errno || n < lo || n > hi) {
          return fmt::format("must be a whole number between {} and {}, got '{}'", lo, hi, v);
        }
        return {};
      },
      fmt::format("{}..{}", lo, hi));
}

CLI::Validator seconds_between(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        char* end = nullptr;
        const double s = std::strtod(v.c_str(), &end);
        if (v.empty() || *end || !(s >= lo && s <= hi)) {
          return fmt::format("must be a number of seconds between {:g} and {:g}, got '{}'", lo, hi,
                             v);
        }
        return {};
      },
      "SECONDS");
}

CLI::Validator log_level_name() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        return log::valid_level(v)
                   ? ""
                   : "expected trace, debug, info, warn, error or off, got '" + v + "'";
      },
      "LEVEL");
}

std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
  auto distance = [](std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      size_t diag = row[0];
      row[0] = i;
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t up = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
        diag = up;
      }
    }
    return row[b.size()];
  };
  // A word that is the start of exactly one candidate ("--max-leak") means that candidate.
  std::string prefixed;
  int prefix_hits = 0;
  for (const auto& c : candidates) {
    if (word.size() >= 3 && c.size() > word.size() && c.compare(0, word.size(), word) == 0) {
      prefixed = c;
      ++prefix_hits;
    }
  }
  if (prefix_hits == 1) return prefixed;
  std::string best;
  size_t best_d = std::max<size_t>(1, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    const size_t d = distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

}  // namespace cumemtrace::cli
