// Contract: what `cumemtrace html` and `convert` accept as FILE: a snapshot in JSON (cumemtrace's
// or PyTorch's, read by the strict snapshot reader) or a PyTorch pickle as `_dump_snapshot` wrote
// it (unpickled to JSON first, then read by the same reader). Throws snap::ReadError with a
// one-line message naming the file on anything unreadable.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

#include "snapshot_reader.h"
#include "viz/pickle_reader.h"

namespace cumemtrace::viz {

inline snap::Snapshot read_input_snapshot(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[2] = {0, 0};
  if (!in || !in.read(head, 2) || !looks_like_pickle(std::string_view(head, 2)))
    return snap::read_snapshot_file(path);  // JSON, or the reader's own error for the file
  std::ostringstream bytes;
  bytes << head[0] << head[1] << in.rdbuf();
  std::string text;
  try {
    text = unpickle(bytes.str()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } catch (const std::exception& e) {
    throw snap::ReadError(path + ": " + e.what());
  }
  return snap::read_snapshot(text, path);
}

}  // namespace cumemtrace::viz
