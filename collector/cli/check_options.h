// Contract: the limit flags `cumemtrace check` and `cumemtrace run` share, registered on a CLI11
// command into an analysis::CheckOptions, one size flag per row of verdicts/limits.h (check.h
// says what each limit means). Sizes
// are parsed with snap::parse_bytes ("0", "4096", "12MiB", "1.5GB"); a bad one is a usage error
// naming the flag and the value.
#pragma once

#include <CLI/CLI.hpp>

#include "verdicts/check.h"

namespace cumemtrace::cli {

void add_check_options(CLI::App* app, analysis::CheckOptions& o);

}  // namespace cumemtrace::cli
