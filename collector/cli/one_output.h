// Contract: the first half of every command that turns one snapshot into one file (html,
// convert). The output is checked before the input is read (never the input, never an existing
// file without --force, never a symlink: io/file_output.h), so a long read is not wasted on an
// output that would be refused; then the input is read (io/snapshot_input.h). On a problem
// it prints one "cumemtrace COMMAND: ..." line and returns nothing; the caller exits 2.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "io/file_output.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::cli {

std::optional<snap::Snapshot> read_for_output(std::string_view command, const std::string& input,
                                              const std::string& output,
                                              const io::OutputPolicy& policy);

}  // namespace cumemtrace::cli
