// Contract: where the offline commands put what they write. default_output_path derives
// "run.html" from "run.json" (or "run.pickle" from "dir/run.json": the input's directory, its
// name less a ".json"/".pickle" ending, plus `suffix`). write_output writes through `fill` to
// `path`, or to stdout for "-", with file_output.h's promises: never onto an input, never over an
// existing file without policy.force, never through a symlink, via a temporary renamed into
// place so a failed conversion never leaves half a file; throws io::OutputFileError saying what
// and where on failure.
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include "io/file_output.h"

namespace cumemtrace::io {

std::string default_output_path(const std::string& input, const std::string& suffix);

// Returns the number of bytes written (0 for stdout).
uint64_t write_output(const std::string& path, const io::OutputPolicy& policy,
                      const std::function<void(std::ostream&)>& fill);

}  // namespace cumemtrace::io
