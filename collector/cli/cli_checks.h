// Contract: the option validators and spelling help every subcommand shares, so that a bad value
// is reported in words ("must be a whole number between 1 and 1000, got '0'") instead of CLI11's
// floating-point ranges, and a misspelt name gets a suggestion ("did you mean 'report'?").
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cumemtrace::cli {

// A whole number in [lo, hi].
CLI::Validator between(int64_t lo, int64_t hi);
// A number of seconds in [lo, hi] (decimals allowed).
CLI::Validator seconds_between(double lo, double hi);
// A log level: trace, debug, info, warn, error or off.
CLI::Validator log_level_name();

// The one candidate that `word` begins (3 characters at least), else the candidate closest to
// `word` by edit distance when it is close enough to be a likely typo (at most a third of the
// word's length, and at least 1), else "".
std::string closest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace cumemtrace::cli
