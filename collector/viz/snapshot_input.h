// Contract: what `cumemtrace html` and `convert` accept as FILE: a snapshot in JSON (cumemtrace's
// or PyTorch's) or a PyTorch pickle as `_dump_snapshot` wrote it (unpickled to JSON first). JSON
// goes through the project's strict streaming reader (snapshot_reader.h) where the tree has it,
// else through the lenient DOM loader in viz/snapshot_json_loader.h. Throws InputError, whose
// what() is one line naming the file, on anything unreadable.
#pragma once

#include <stdexcept>
#include <string>

#include "input_file.h"
#include "viz/pickle_reader.h"
#include "viz/snapshot_json_loader.h"

#if __has_include("snapshot_reader.h")
#include "snapshot_reader.h"
#define CUMEMTRACE_VIZ_STRICT_READER 1
#endif

namespace cumemtrace::viz {

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline snap::Snapshot read_input_snapshot(const std::string& path) {
  try {
    // One read through input_file.h (regular files only, bounded, no mmap); the bytes then go to
    // the JSON reader or the unpickler.
    const std::string bytes = io::read_input_file(path, "a snapshot", io::kMaxSnapshotBytes);
    const std::string name = path == "-" ? "<stdin>" : path;
    const bool pickle = bytes.size() >= 2 && looks_like_pickle(std::string_view(bytes.data(), 2));
    if (!pickle) {
      if (bytes.empty()) {
        throw std::runtime_error(name + ":offset 0: expected JSON, found an empty file");
      }
#ifdef CUMEMTRACE_VIZ_STRICT_READER
      return snap::read_snapshot(bytes, name);
#else
      return snapshot_from_json(nlohmann::json::parse(bytes), name);
#endif
    }
    nlohmann::json j;
    try {
      j = unpickle(bytes);
    } catch (const std::exception& e) {
      throw std::runtime_error(name + ": " + e.what());
    }
#ifdef CUMEMTRACE_VIZ_STRICT_READER
    return snap::read_snapshot(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                               name);
#else
    return snapshot_from_json(j, name);
#endif
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(e.what());
  }
}

}  // namespace cumemtrace::viz
