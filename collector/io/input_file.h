// Contract: the one way cumemtrace reads a file the user names (snapshots, suppressions files).
// read_input_file opens PATH without blocking (a FIFO or a device never hangs the command), checks
// with fstat that it is a regular file, and read()s it into memory: never mmap, so a file that
// shrinks while it is read ends the read early instead of killing the process with SIGBUS. "-"
// reads stdin (whatever it is: a pipe is how stdin usually arrives). Sizes are bounded: more than
// `max_bytes`, found by fstat or while reading (a file that grows), is an error. check_line_lengths
// bounds the longest line of a text file; a HeadCheck refuses a file from its first bytes. Every
// failure throws InputFileError whose what() is one line naming the file, what was expected and,
// for a system call that failed, the errno text: "rules.supp: cannot open: No such file or
// directory",
// "/dev/zero: expected a regular file (a suppressions file), found a character device".
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cumemtrace::io {

class InputFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Limits that commands use; a file larger than these is refused with a message saying so.
inline constexpr uint64_t kMaxSnapshotBytes = uint64_t{64} << 30;      // 64 GiB
inline constexpr uint64_t kMaxSuppressionsBytes = uint64_t{16} << 20;  // 16 MiB
inline constexpr size_t kMaxSuppressionsLine = 64 << 10;               // 64 KiB

// What a file's first bytes say: "" when they may begin `what`, else the refusal after the
// file's name ("offset 0: expected a snapshot (JSON or a pickle), found byte 0x00").
using HeadCheck = std::string (*)(std::string_view head);
// How many bytes a HeadCheck is shown: all of a shorter file.
inline constexpr size_t kHeadBytes = 4096;

// `what` names the expected content in messages ("a snapshot", "a suppressions file"). With a
// `head_check`, the file's first kHeadBytes are read and judged before the rest is read or any
// memory is taken for it: a large file of the wrong kind is refused at once.
std::string read_input_file(const std::string& path, std::string_view what, uint64_t max_bytes,
                            HeadCheck head_check = nullptr);

// Throws unless every line of `text` is at most `max_line` bytes long.
void check_line_lengths(std::string_view text, const std::string& path, size_t max_line);

// "a FIFO", "a directory", "a character device"...: what a stat mode is, for messages.
std::string describe_file_type(unsigned mode);

}  // namespace cumemtrace::io
