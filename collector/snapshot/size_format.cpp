#include "snapshot/size_format.h"

#include <cctype>
#include <cmath>
#include <string>

#include <fmt/format.h>

namespace cumemtrace::snap {

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes);
  int u = 0;
  // 1023.7 KiB prints as "1.00 MiB": the unit is chosen on the value as it will be rounded.
  while (v >= 1023.5 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  // Three significant digits of the rounded value: 9.996 is "10.0", 99.96 is "100".
  const int decimals = v >= 99.95 ? 0 : v >= 9.995 ? 1 : 2;
  return fmt::format("{:.{}f} {}", v, decimals, kUnits[u]);
}

std::string format_signed_bytes(int64_t bytes) {
  // fmt, not "-" + std::string: GCC 12 at -O3 (Release) warns a false -Wrestrict there.
  if (bytes < 0) return fmt::format("-{}", format_bytes(static_cast<uint64_t>(-(bytes + 1)) + 1));
  return fmt::format("+{}", format_bytes(static_cast<uint64_t>(bytes)));
}

std::optional<uint64_t> parse_bytes(std::string_view text) {
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t start = i;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'))
    ++i;
  if (i == start) return std::nullopt;
  const std::string number(text.substr(start, i - start));
  if (number.find('.') != number.rfind('.') || number == ".") return std::nullopt;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit;
  for (; i < text.size(); ++i) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) break;
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[i])));
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i != text.size()) return std::nullopt;
  double mult = 1;
  if (unit.empty() || unit == "b") {
    mult = 1;
  } else if (unit == "k" || unit == "kib") {
    mult = 1024.0;
  } else if (unit == "m" || unit == "mib") {
    mult = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gib") {
    mult = 1024.0 * 1024 * 1024;
  } else if (unit == "t" || unit == "tib") {
    mult = 1024.0 * 1024 * 1024 * 1024;
  } else if (unit == "kb") {
    mult = 1e3;
  } else if (unit == "mb") {
    mult = 1e6;
  } else if (unit == "gb") {
    mult = 1e9;
  } else if (unit == "tb") {
    mult = 1e12;
  } else {
    return std::nullopt;
  }
  if (number.find('.') == std::string::npos && mult == 1) {
    if (number.size() > 20) return std::nullopt;
    uint64_t v = 0;
    for (char c : number) {
      const uint64_t d = static_cast<uint64_t>(c - '0');
      if (v > (UINT64_MAX - d) / 10) return std::nullopt;
      v = v * 10 + d;
    }
    return v;
  }
  const double v = std::stod(number) * mult;
  if (!std::isfinite(v) || v >= 1.8e19) return std::nullopt;
  return static_cast<uint64_t>(std::llround(v));
}

}  // namespace cumemtrace::snap
