// Contract: the preload's text records of "key=value" lines (kTorchInfo, kRankInfo): fn(key,
// value) for each line that has a '=' (split at the first); other lines are skipped (the ring is
// untrusted input).
#pragma once

#include <string>

namespace cumemtrace::collect {

template <typename Fn>
void for_each_key_value(const std::string& text, Fn fn) {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    const std::string line = text.substr(pos, nl - pos);
    pos = nl + 1;
    const auto eq = line.find('=');
    if (eq != std::string::npos) fn(line.substr(0, eq), line.substr(eq + 1));
  }
}

}  // namespace cumemtrace::collect
