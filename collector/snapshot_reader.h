// Contract: reads a snapshot JSON file — cumemtrace's own (schemas/snapshot.schema.json) or
// PyTorch's memory-history snapshot converted to JSON — into snap::Snapshot. Streaming (SAX), so a
// million-event file never exists as a DOM. Strict: wrong types, missing required keys, negative
// or non-integral numbers, integers above 2^53, unknown action/state/stage strings and a
// cumemtrace schema_version other than 1 are errors; unknown keys are skipped so newer PyTorch
// fields do not break old readers. Never crashes on any input: every problem becomes a ReadError
// whose what() is one line, "NAME:offset N: expected X" (N = byte offset just past the offending
// token). Identical frame lists are interned into one Snapshot::stacks entry.
// PyTorch pickles are not read; convert them first:
//   python -c "import pickle,json;json.dump(pickle.load(open('s.pickle','rb')),open('s.json','w'))"
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "snapshot.h"

namespace cumemtrace::snap {

class ReadError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `name` is only used in error messages (usually the path).
Snapshot read_snapshot(std::string_view text, const std::string& name);
Snapshot read_snapshot_file(const std::string& path);

// The same reader driven by nlohmann::json::sax_parse instead of the built-in scanner: slower,
// kept as the reference that tests and the fuzzer compare read_snapshot against (both must accept
// and reject the same inputs and build the same Snapshot; error offsets may differ).
Snapshot read_snapshot_reference(std::string_view text, const std::string& name);

}  // namespace cumemtrace::snap
