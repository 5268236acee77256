#include "snapshot_input.h"

#include <fmt/format.h>

#include "input_file.h"
#include "viz/pickle_reader.h"

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
  if (viz::looks_like_pickle(bytes)) return viz::read_pickle_snapshot(bytes, name);
  return read_snapshot(bytes, name);
}

}  // namespace cumemtrace::snap
