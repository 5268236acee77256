// Contract: byte sizes for people and for command lines. format_bytes gives "1.50 GiB",
// "12.0 MiB", "512 B". parse_bytes accepts plain bytes ("1048576"), binary units ("12MiB",
// "1.5 GiB", "4k" = KiB) and decimal units ("1.5GB"), case-insensitive, and returns nullopt for
// anything else (negative, junk, overflow).
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
