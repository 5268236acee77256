// Contract: writes a Snapshot as the JSON file described by schemas/snapshot.schema.json, which
// pytorch.org/memory_viz opens as it is. Streaming (no DOM), so a million events fit in memory
// twice at most. Frames are written on alloc and oom entries and on live blocks (PyTorch's
// context="alloc" layout); free entries carry none, which keeps files a fraction of the size.
// write_snapshot_file never overwrites or follows a symlink: it creates `path` with O_EXCL and,
// when that name exists, picks `stem.1.json`, `stem.2.json`...; it returns the name it used.
#pragma once

#include <cstdio>
#include <string>

#include "snapshot.h"

namespace cumemtrace::snap {

std::string to_json(const Snapshot& s);

// Returns the path written; throws std::runtime_error with errno text on failure.
std::string write_snapshot_file(const Snapshot& s, const std::string& path);

}  // namespace cumemtrace::snap
