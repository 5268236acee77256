// Contract: text from stacks is whatever bytes a symbolizer or a Python file name held, but a
// pickle's unicode opcodes and JSON must carry valid UTF-8 (Python's unpickler throws on anything
// else). valid_utf8 checks; to_valid_utf8 replaces each bad byte with U+FFFD; append_json_string
// appends a quoted, escaped JSON string ("</" written as "<\/" so it can sit inside <script>).
#pragma once

#include <map>
#include <set>
#include <string>
#include <string_view>

namespace cumemtrace::snap {

bool valid_utf8(std::string_view s);
std::string to_valid_utf8(std::string_view s);
void append_json_string(std::string& out, std::string_view s);

// Calls f(key, value) for each entry of m, in order, skipping a key that repairs (U+FFFD) to the
// same text as one before it: a JSON object or pickled dict written from m never holds a key
// twice, so every reader gets the same entries.
template <typename F>
void for_each_distinct_key(const std::map<std::string, std::string>& m, F&& f) {
  bool all_valid = true;
  for (const auto& entry : m) all_valid = all_valid && valid_utf8(entry.first);
  std::set<std::string> written;
  for (const auto& [k, v] : m) {
    if (!all_valid && !written.insert(valid_utf8(k) ? k : to_valid_utf8(k)).second) continue;
    f(k, v);
  }
}

}  // namespace cumemtrace::snap
