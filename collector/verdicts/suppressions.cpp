#include "verdicts/suppressions.h"

#include <fmt/format.h>

#include "io/input_file.h"

namespace cumemtrace::analysis {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

// Glob with `*` only, over the whole of `text` — iterative with one backtrack point, so a
// pattern of many stars stays linear-ish and cannot blow the stack.
bool glob_full(std::string_view p, std::string_view t) {
  size_t pi = 0, ti = 0, star = std::string_view::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = ti;
    } else if (pi < p.size() && p[pi] == t[ti]) {
      ++pi;
      ++ti;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

}  // namespace

bool pattern_matches(std::string_view pattern, std::string_view text) {
  const bool start = !pattern.empty() && pattern.front() == '^';
  if (start) pattern.remove_prefix(1);
  const bool end = !pattern.empty() && pattern.back() == '$';
  if (end) pattern.remove_suffix(1);
  std::string full;
  if (!start) full += '*';
  full += pattern;
  if (!end) full += '*';
  return glob_full(full, text);
}

std::vector<Suppression> parse_suppressions(std::string_view text, const std::string& name) {
  std::vector<Suppression> out;
  size_t line_no = 0;
  while (!text.empty()) {
    ++line_no;
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;
    const size_t colon = line.find(':');
    const std::string_view type =
        colon == std::string_view::npos ? line : trim(line.substr(0, colon));
    Suppression s;
    if (type == "leak") {
      s.type = SuppressionType::kLeak;
    } else if (type == "growth") {
      s.type = SuppressionType::kGrowth;
    } else {
      throw SuppressionError(
          fmt::format("{}:{}: expected `leak:PATTERN` or `growth:PATTERN`", name, line_no));
    }
    if (colon == std::string_view::npos) {
      throw SuppressionError(fmt::format("{}:{}: expected `{}:PATTERN`", name, line_no, type));
    }
    s.pattern = std::string(trim(line.substr(colon + 1)));
    if (s.pattern.empty() || s.pattern == "^" || s.pattern == "$" || s.pattern == "^$") {
      throw SuppressionError(
          fmt::format("{}:{}: expected a pattern after `{}:`", name, line_no, type));
    }
    s.source = fmt::format("{}:{}", name, line_no);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<Suppression> load_suppressions(const std::string& path) {
  try {
    const std::string text =
        io::read_input_file(path, "a suppressions file", io::kMaxSuppressionsBytes);
    io::check_line_lengths(text, path, io::kMaxSuppressionsLine);
    return parse_suppressions(text, path == "-" ? "<stdin>" : path);
  } catch (const io::InputFileError& e) {
    throw SuppressionError(e.what());
  }
}

const Suppression* find_suppression(const std::vector<Suppression>& rules, SuppressionType type,
                                    const snap::Snapshot& s, int32_t stack) {
  if (stack < 0 || static_cast<size_t>(stack) >= s.stacks.size()) return nullptr;
  const auto& st = s.stacks[static_cast<size_t>(stack)];
  for (const auto& r : rules) {
    if (r.type != type) continue;
    for (const auto& f : st) {
      if (pattern_matches(r.pattern, f.name) || pattern_matches(r.pattern, f.filename)) return &r;
    }
  }
  return nullptr;
}

}  // namespace cumemtrace::analysis
