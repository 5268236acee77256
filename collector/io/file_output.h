// Contract: the one way cumemtrace writes a file the user names (html, convert, --junit,
// --verdict-file). Promises, so that an output never destroys an input or another file:
//  - an output that is the same file as one of `inputs` (same st_dev and st_ino, whatever the
//    spelling of the path) is refused, --force or not;
//  - an existing output is refused unless `force`; a symbolic link, a directory or anything but
//    a regular file at the output path is always refused (never followed, never replaced);
//  - the bytes go to a temporary created in the target's directory with
//    O_CREAT|O_EXCL|O_NOFOLLOW (so a planted file or symlink at that name is never opened), then
//    renamed onto the path: without `force` with RENAME_NOREPLACE, so a file created meanwhile is
//    not replaced either. A failed write removes the temporary and leaves the target untouched.
// "-" writes to stdout. Errors are one line naming the file and, for a failed system call, the
// errno text; they are thrown as OutputFileError.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace cumemtrace::io {

class OutputFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct OutputPolicy {
  bool force = false;               // replace an existing regular file
  std::vector<std::string> inputs;  // files the output must never be
};

// The checks write_output_file makes before writing, for validating options before a long job
// starts: an empty string when `path` may be written, else one line saying why not (including a
// directory that does not exist or cannot be written).
std::string output_problem(const std::string& path, const OutputPolicy& policy);

// Returns the number of bytes written.
uint64_t write_output_file(const std::string& path, const OutputPolicy& policy,
                           const std::function<void(std::ostream&)>& fill);

}  // namespace cumemtrace::io
