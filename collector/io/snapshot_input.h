// Contract: the one way an offline command (report, check, diff, html, convert) reads a snapshot
// file, and the one place a path given on the command line is opened and its bytes read.
// The bytes come through io::read_input_file (input_file.h: regular files only, "-" for stdin,
// bounded, read() not mmap). Its first bytes are judged before the rest is read: a file that
// begins neither with '{' (after whitespace or a UTF-8 BOM) nor with a pickle's protocol byte is
// refused at once, whatever its size. read_snapshot_any detects the format from the bytes: a pickle
// (PyTorch's `_dump_snapshot`, protocols 2 to 5, or ours) goes to viz/pickle_reader.h, anything
// else to the strict JSON reader (snapshot_reader.h), which takes cumemtrace's and PyTorch's JSON
// alike. The file is read with read() into memory (no mmap: a file that shrinks while mapped would
// raise SIGBUS). Every problem, from open() to a bad byte deep in the file, is a snap::ReadError
// whose what() is one line naming the path.
#pragma once

#include <string>

#include "snapshot/snapshot.h"
#include "snapshot/snapshot_reader.h"

namespace cumemtrace::snap {

Snapshot read_snapshot_any(const std::string& path);

}  // namespace cumemtrace::snap
