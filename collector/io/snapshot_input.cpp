#include "io/snapshot_input.h"

#include <chrono>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "io/input_file.h"
#include "snapshot/pickle_reader.h"

namespace cumemtrace::snap {

namespace {

// What a file that is no snapshot is, from its first bytes: a user told "a JSON array" knows
// what they gave; "byte 0x5b" they would have to decode.
std::string what_it_is(std::string_view head, size_t i) {
  if (head.substr(0, 2) == "\x1f\x8b") return "a gzip-compressed file (decompress it first)";
  if (head.substr(0, 4) == "PK\x03\x04") return "a zip archive (a torch.save file?)";
  const char c = head[i];
  if (c == '[') return "a JSON array ('['; a snapshot is one JSON object, '{...}')";
  if (c == '"') return "a JSON string ('\"'; a snapshot is one JSON object, '{...}')";
  if (c == '-' || (c >= '0' && c <= '9'))
    return fmt::format("a number ('{}'; a snapshot is one JSON object, '{{...}}')", c);
  if (c == '<') return "markup ('<': an HTML or XML file?)";
  return fmt::format("byte {:#04x}", static_cast<unsigned char>(c));
}

// A snapshot begins with '{' (JSON, after whitespace or a UTF-8 byte order mark) or with a
// pickle's PROTO opcode; anything else is refused before the rest is read. An empty file, or
// whitespace only as far as the head goes, is left to the readers' own messages.
std::string snapshot_head_problem(std::string_view head) {
  if (head.empty() || snap::looks_like_pickle(head)) return {};
  size_t i = head.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
  while (i < head.size() &&
         (head[i] == ' ' || head[i] == '\t' || head[i] == '\r' || head[i] == '\n'))
    ++i;
  if (i == head.size() || head[i] == '{') return {};
  return fmt::format("offset {}: expected a snapshot (JSON or a pickle), found {}", i,
                     what_it_is(head, i));
}

}  // namespace

Snapshot read_snapshot_any(const std::string& path) {
  std::string bytes;
  try {
    bytes = io::read_input_file(path, "a snapshot", io::kMaxSnapshotBytes, snapshot_head_problem);
  } catch (const io::InputFileError& e) {
    throw ReadError(e.what());
  }
  const std::string name = path == "-" ? "<stdin>" : path;
  if (bytes.empty())
    throw ReadError(fmt::format("{}:offset 0: expected a snapshot, found an empty file", name));
  const auto start = std::chrono::steady_clock::now();
  const bool pickle = snap::looks_like_pickle(bytes);
  Snapshot s = pickle ? snap::read_pickle_snapshot(bytes, name) : read_snapshot(bytes, name);
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
