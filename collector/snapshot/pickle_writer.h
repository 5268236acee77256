// Contract: writes a Snapshot as a protocol-4 pickle of the same dict that the JSON writer
// writes (segment_pool_id as a 2-tuple, as PyTorch pickles it), which `pickle.load` and so
// `python -m torch.cuda._memory_viz`, and every MemoryViz.js since 2023, read. Only the opcodes
// MemoryViz.js's unpickler knows are used (torch-snapshot-format.md §3.2): PROTO 4, MARK,
// EMPTY_DICT/LIST, SETITEMS, APPEND(S), TUPLE2, NEWTRUE/NEWFALSE, BININT1/BININT2/BININT, LONG1,
// SHORT_BINUNICODE/BINUNICODE, MEMOIZE, BINGET/LONG_BINGET, STOP. Lists and dicts are written in
// batches of at most 1000 items per MARK (the JS unpickler spreads a batch into one call).
// Strings and shared frame lists are memoized, so a stack shared by many events costs one copy.
#pragma once

#include <ostream>
#include <string>

#include "snapshot/snapshot.h"

namespace cumemtrace::snap {

inline constexpr size_t kPickleBatch = 1000;

void write_pickle(const snap::Snapshot& s, std::ostream& out);
std::string to_pickle(const snap::Snapshot& s);

}  // namespace cumemtrace::snap
