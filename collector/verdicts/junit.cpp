#include "verdicts/junit.h"

#include <map>

#include <fmt/format.h>

namespace cumemtrace::analysis {

namespace {

std::string xml(std::string_view s) {
  std::string o;
  o.reserve(s.size());
  for (unsigned char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      case '\'':
        o += "&apos;";
        break;
      default:
        if (c < 0x20 && c != '\n' && c != '\t' && c != '\r') continue;  // not allowed in XML 1.0
        o.push_back(static_cast<char>(c));
    }
  }
  return o;
}

std::string case_name(const Finding& f) {
  return f.device >= 0 ? fmt::format("{} (device {})", f.check, f.device) : f.check;
}

}  // namespace

void write_junit(const CheckResult& r, std::ostream& out) {
  int tests = 0;
  for (const auto& f : r.findings) tests += f.severity != Severity::kWarning;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out << fmt::format(
      "<testsuites name=\"cumemtrace check\" tests=\"{}\" failures=\"{}\" errors=\"0\">\n", tests,
      r.failures());
  for (size_t i = 0; i < r.snapshots.size(); ++i) {
    const std::string& snap = r.snapshots[i];
    int t = 0, failed = 0;
    for (const auto& f : r.findings) {
      if (f.snapshot != snap || f.severity == Severity::kWarning) continue;
      ++t;
      failed += f.severity == Severity::kError;
    }
    out << fmt::format(
        "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\">\n",
        xml(r.label(i)), t, failed);
    for (const auto& f : r.findings) {
      if (f.snapshot != snap || f.severity == Severity::kWarning) continue;
      out << fmt::format("    <testcase classname=\"cumemtrace.{}\" name=\"{}\" file=\"{}\"",
                         xml(snap), xml(case_name(f)), xml(snap));
      if (f.severity == Severity::kPass) {
        out << fmt::format("><system-out>{}</system-out></testcase>\n", xml(f.message));
        continue;
      }
      std::string body = f.message + "\n";
      for (const auto& s : f.stacks) {
        if (!s.title.empty()) body += "  " + s.title + ":\n";
        for (const auto& l : s.lines) body += "    " + l + "\n";
      }
      if (f.stacks_omitted) body += fmt::format("  ... {} more stacks\n", f.stacks_omitted);
      out << fmt::format(
          ">\n      <failure message=\"{}\" type=\"{}\">{}</failure>\n    </testcase>\n",
          xml(f.message), xml(f.check), xml(body));
    }
    out << "  </testsuite>\n";
  }
  out << "</testsuites>\n";
}

}  // namespace cumemtrace::analysis
