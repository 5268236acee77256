#include "verdicts/github.h"

#include <cstdlib>

#include <fmt/format.h>

namespace cumemtrace::analysis {

namespace {

// Escaping rules of the Actions runner (toolkit/core command.ts).
std::string escape_data(std::string_view s) {
  std::string o;
  for (char c : s) {
    if (c == '%') {
      o += "%25";
    } else if (c == '\r') {
      o += "%0D";
    } else if (c == '\n') {
      o += "%0A";
    } else {
      o.push_back(c);
    }
  }
  return o;
}

std::string escape_property(std::string_view s) {
  std::string o;
  for (char c : escape_data(s)) {
    if (c == ':') {
      o += "%3A";
    } else if (c == ',') {
      o += "%2C";
    } else {
      o.push_back(c);
    }
  }
  return o;
}

// Annotations only attach to files given relative to the checkout; frames often hold absolute
// paths of the CI machine's checkout, so strip $GITHUB_WORKSPACE when it is a prefix.
std::string workspace_relative(const std::string& file) {
  const char* ws = std::getenv("GITHUB_WORKSPACE");
  if (!ws || !*ws) return file;
  std::string prefix = ws;
  if (prefix.back() != '/') prefix += '/';
  return file.rfind(prefix, 0) == 0 ? file.substr(prefix.size()) : file;
}

}  // namespace

void write_github(const CheckResult& r, std::ostream& out) {
  for (const auto& f : r.findings) {
    if (f.severity == Severity::kPass) continue;
    std::string file = f.snapshot;
    int64_t line = 0;
    for (const auto& s : f.stacks) {
      if (!s.file.empty() && s.file != "??") {
        file = s.file;
        line = s.line;
        break;
      }
    }
    std::string msg = f.snapshot + ": " + f.message;
    for (const auto& s : f.stacks) {
      if (!s.title.empty()) msg += "\n  " + s.title + ":";
      for (const auto& l : s.lines) msg += "\n    " + l;
    }
    std::string props = "file=" + escape_property(workspace_relative(file));
    if (line > 0) props += fmt::format(",line={}", line);
    props += ",title=" + escape_property("cumemtrace " + f.check);
    out << (f.severity == Severity::kError ? "::error " : "::warning ") << props
        << "::" << escape_data(msg) << '\n';
  }
  out << fmt::format("cumemtrace check: {} failed, {} passed\n", r.failures(), r.passes());
}

}  // namespace cumemtrace::analysis
