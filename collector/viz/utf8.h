// Contract: text from stacks is whatever bytes a symbolizer or a Python file name held, but a
// pickle's unicode opcodes and JSON must carry valid UTF-8 (Python's unpickler throws on anything
// else). valid_utf8 checks; to_valid_utf8 replaces each bad byte with U+FFFD; append_json_string
// appends a quoted, escaped JSON string ("</" written as "<\/" so it can sit inside <script>).
#pragma once

#include <string>
#include <string_view>

namespace cumemtrace::viz {

bool valid_utf8(std::string_view s);
std::string to_valid_utf8(std::string_view s);
void append_json_string(std::string& out, std::string_view s);

}  // namespace cumemtrace::viz
