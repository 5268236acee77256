// Contract: writes a Snapshot as the JSON file described by schemas/snapshot.schema.json, which
// pytorch.org/memory_viz opens as it is. Streaming (no DOM), so a million events fit in memory
// twice at most. Frames are written on alloc and oom entries and on live blocks (PyTorch's
// context="alloc" layout); free entries carry none, which keeps files a fraction of the size.
// Text that is not valid UTF-8 (argv, thread and mark names, paths, symbols are whatever bytes the
// program had) is written with each invalid byte as U+FFFD: every JSON reader opens the file, and
// reading it back and writing it again gives the same bytes. "source" is written on entries and
// segments that are PyTorch's, only in files with a tool section (in PyTorch's own, all are).
// write_snapshot_file never overwrites or follows a symlink: it creates `path` with O_EXCL and,
// when that name exists, picks `stem.1.json`, `stem.2.json`...; it returns the name it used.
#pragma once

#include <cstdio>
#include <ostream>
#include <string>

#include "snapshot/snapshot.h"

namespace cumemtrace::snap {

std::string to_json(const Snapshot& s);
void write_json(const Snapshot& s, std::ostream& out);  // streamed in pieces of a few MiB

// Returns the path written; throws std::runtime_error with errno text on failure.
std::string write_snapshot_file(const Snapshot& s, const std::string& path);

}  // namespace cumemtrace::snap
