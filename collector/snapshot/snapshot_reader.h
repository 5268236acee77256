// Contract: reads a snapshot JSON file — cumemtrace's own (schemas/snapshot.schema.json) or
// PyTorch's memory-history snapshot converted to JSON — into snap::Snapshot. Streaming (SAX), so a
// million-event file never exists as a DOM. Strict: wrong types, missing required keys, negative
// or non-integral numbers, integers above 2^53, unknown action/state/stage strings and a
// cumemtrace schema_version other than 1 are errors; unknown keys are skipped so newer PyTorch
// fields do not break old readers. Never crashes on any input: every problem becomes a ReadError
// whose what() is one line, "NAME:offset N: expected X" (N = byte offset just past the offending
// token). Identical frame lists are interned into one Snapshot::stacks entry. Keys are matched by
// name, in any order. "source" is read on entries and segments; a file without a `cumemtrace`
// section is PyTorch's own, and everything in it comes back as Source::kPytorch.
// SnapshotBuilder drives the same checks from events instead of text: the pickle reader
// (snapshot/pickle_reader.h) streams unpickled objects through it. Files are opened and read in
// one place only: snapshot_input.h. The keys, required keys and checks of the tool section and
// annotations come from snapshot_fields.h (a missing key is named in that table's order).
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "snapshot/read_error.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::snap {

// `name` is only used in error messages (usually the path).
Snapshot read_snapshot(std::string_view text, const std::string& name);

// The same reader driven by nlohmann::json::sax_parse instead of the built-in scanner: slower,
// kept as the reference that tests and the fuzzer compare read_snapshot against (both must accept
// and reject the same inputs and build the same Snapshot; error offsets may differ).
Snapshot read_snapshot_reference(std::string_view text, const std::string& name);

// The reader's model-building half, fed one JSON-like event at a time (what a SAX parser would
// call): the same key names, types, limits and error messages as read_snapshot, errors at the
// offset last given to at(). For a frames list that the source knows is the same object as one
// fed before, reuse_stack(last_stack() of that time) replaces its events: one stack, no copy.
class SnapshotBuilder {
 public:
  explicit SnapshotBuilder(std::string name);
  ~SnapshotBuilder();
  SnapshotBuilder(const SnapshotBuilder&) = delete;
  SnapshotBuilder& operator=(const SnapshotBuilder&) = delete;

  void at(uint64_t offset);
  void null();
  void boolean(bool b);
  void integer(int64_t i);
  void unsigned_integer(uint64_t u);
  void floating(double d);
  void string(std::string_view s);
  void start_object();
  void key(std::string_view k);
  void end_object();
  void start_array();
  void end_array();

  bool frames_next() const;  // the array about to start is a "frames" list
  void reuse_stack(int32_t stack);
  int32_t last_stack() const;  // the stack the last complete frames list was interned as

  Snapshot finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cumemtrace::snap
