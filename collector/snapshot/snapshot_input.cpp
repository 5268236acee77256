#include "snapshot/snapshot_input.h"

#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "io/input_file.h"
#include "snapshot/pickle_reader.h"

namespace cumemtrace::snap {

Snapshot read_snapshot_any(const std::string& path) {
  std::string bytes;
  try {
    bytes = io::read_input_file(path, "a snapshot", io::kMaxSnapshotBytes);
  } catch (const io::InputFileError& e) {
    throw ReadError(e.what());
  }
  const std::string name = path == "-" ? "<stdin>" : path;
  if (bytes.empty())
    throw ReadError(fmt::format("{}:offset 0: expected a snapshot, found an empty file", name));
  const auto start = std::chrono::steady_clock::now();
  const bool pickle = viz::looks_like_pickle(bytes);
  Snapshot s = pickle ? viz::read_pickle_snapshot(bytes, name) : read_snapshot(bytes, name);
  size_t trace_entries = 0;
  for (const auto& t : s.device_traces) trace_entries += t.size();
  spdlog::debug("read {} ({} bytes, {}) in {} ms: {} segments, {} trace entries", name,
                bytes.size(), pickle ? "pickle" : "JSON",
                std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::steady_clock::now() - start)
                    .count(),
                s.segments.size(), trace_entries);
  return s;
}

}  // namespace cumemtrace::snap
