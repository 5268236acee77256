// Contract: what `cumemtrace html` and `convert` accept as FILE: a snapshot in JSON (cumemtrace's
// or PyTorch's) or a PyTorch pickle as `_dump_snapshot` wrote it (unpickled to JSON first). JSON
// goes through the project's strict streaming reader (snapshot_reader.h); a pickle is unpickled
// and read by the same reader. Throws InputError, whose what() is one line naming the file, on
// anything unreadable.
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include "snapshot_reader.h"
#include "viz/pickle_reader.h"

namespace cumemtrace::viz {

struct InputError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

inline snap::Snapshot read_input_snapshot(const std::string& path) {
  try {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error(path + ": cannot open");
    char head[2] = {0, 0};
    const bool pickle = in.read(head, 2) && looks_like_pickle(std::string_view(head, 2));
    if (!pickle) return snap::read_snapshot_file(path);
    std::ostringstream bytes;
    bytes << head[0] << head[1] << in.rdbuf();
    nlohmann::json j;
    try {
      j = unpickle(bytes.str());
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ": " + e.what());
    }
    return snap::read_snapshot(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                               path);
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw InputError(e.what());
  }
}

}  // namespace cumemtrace::viz
