// Contract: the collector's own diagnostics (never the preload's, never the user-facing
// `cumemtrace: ...` verdict and summary lines, which stay plain output). spdlog, used header-only.
// Level from `--log-level` (every subcommand) or CUMEMTRACE_LOG: trace, debug, info, warn (the
// default), error, off. At debug the collector says what a problem report needs: sessions opened
// and closed, ring sizes, events and drops, snapshot build (symbolization) time, files written.
// Records go to stderr; with CUMEMTRACE_LOG_FILE they go to that file instead (appended, created
// 0644, never through a symlink; a relative name is taken in the snapshot directory), since the
// collector the preload starts by itself outlives the program's terminal.
#pragma once

#include <string>

#include <spdlog/spdlog.h>

namespace cumemtrace::log {

// Sets up the default logger. `level` empty = CUMEMTRACE_LOG or "warn"; `output_dir` is where a
// relative CUMEMTRACE_LOG_FILE goes. Returns one line saying what is wrong, or "".
std::string init(const std::string& level, const std::string& output_dir);

// "trace|debug|info|warn|error|off", for validating --log-level.
bool valid_level(const std::string& level);

}  // namespace cumemtrace::log
