// Contract: reads the pickles PyTorch writes for memory snapshots (`_dump_snapshot` with any
// protocol from 2 to 5, torch::jit's C++ pickler, and ours) straight into snap::Snapshot. The
// pickle is first run as a compact object graph (16 bytes per value, strings left in the input,
// shared objects kept shared) and then streamed through snap::SnapshotBuilder, the JSON reader's
// own model-building half: the same keys, checks and interning, no JSON text and no DOM. A frames
// list that the pickle shares (memo fetch) is interned once and reused by reference.
// Only the plain-data opcodes such pickles use are understood (dicts, lists, tuples as lists,
// str, int, float, bool, None, memo); anything else (classes, bytes, persistent ids) is an error.
// Defences: a cycle or nesting deeper than 64 is refused, and so is sharing that would expand to
// more than 16 values per input byte. Every problem is a snap::ReadError, one line naming the
// input and the pickle offset; never a crash.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "snapshot/snapshot.h"

namespace cumemtrace::snap {

bool looks_like_pickle(std::string_view bytes);

// `name` is only used in error messages (usually the path).
snap::Snapshot read_pickle_snapshot(std::string_view bytes, const std::string& name);

// The unpickled value as JSON (tuples as lists), for tests and debugging: the same decoder and
// the same defences as read_pickle_snapshot.
nlohmann::json unpickle(std::string_view bytes);

}  // namespace cumemtrace::snap
