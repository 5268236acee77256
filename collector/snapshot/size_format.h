// Contract: byte sizes for people and for command lines. format_bytes is the project's one size
// rule, used by every text it prints (report, check, diff, run, whatif, the OOM verdict): binary
// units, three significant digits ("1.50 GiB", "12.0 MiB", "600 MiB", "512 B"); a value that
// rounds up to 1024 of a unit is written in the next ("1.00 MiB", never "1024 KiB"). The HTML
// page (viz/assets/report.js fmtBytes) and the pytest plugin (python/cumemtrace/pytest_plugin.py
// format_bytes) follow it; tests/fixtures/size_format_cases.txt holds the cases all three meet.
// parse_bytes accepts plain bytes ("1048576"), binary units ("12MiB", "1.5 GiB", "4k" = KiB) and
// decimal units ("1.5GB"), case-insensitive, and returns nullopt for anything else (negative, junk,
// overflow).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cumemtrace::snap {

std::string format_bytes(uint64_t bytes);
std::string format_signed_bytes(int64_t bytes);
std::optional<uint64_t> parse_bytes(std::string_view text);

}  // namespace cumemtrace::snap
