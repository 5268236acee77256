// Contract: where the offline commands put what they write. default_output_path derives
// "run.html" from "run.json" (or "run.pickle" from "dir/run.json": the input's directory, its
// name less a ".json"/".pickle" ending, plus `suffix`). write_output writes through `fill` to
// `path`, or to stdout for "-", creating the file via a temporary name and renaming it over the
// target, so a failed conversion never leaves half a file; throws std::runtime_error saying what
// and where on failure.
#pragma once

#include <functional>
#include <ostream>
#include <string>

namespace cumemtrace::viz {

std::string default_output_path(const std::string& input, const std::string& suffix);

// Returns the number of bytes written.
uint64_t write_output(const std::string& path, const std::function<void(std::ostream&)>& fill);

}  // namespace cumemtrace::viz
