// libFuzzer target for the snapshot reader and everything downstream of it. Contract checked on
// every input: the reader either returns a Snapshot or throws ReadError with a one-line message
// naming the file, exactly when the nlohmann-driven reference reader rejects it too; an accepted
// snapshot is the same as the reference's and it survives write -> read -> write unchanged and the
// whole analysis (report, every check limit, diff) runs on it without crashing or sanitizer
// findings.
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <streambuf>
#include <string_view>

#include "snapshot/snapshot_json_writer.h"
#include "snapshot/snapshot_reader.h"
#include "verdicts/check.h"
#include "verdicts/diff.h"
#include "verdicts/report.h"

using namespace cumemtrace;

namespace {

class NullBuf : public std::streambuf {
 protected:
  int overflow(int c) override { return c; }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  snap::Snapshot s;
  // The nlohmann-driven reference must agree: same verdict, same snapshot.
  std::string reference;
  try {
    reference = snap::to_json(snap::read_snapshot_reference(text, "fuzz.json"));
  } catch (const snap::ReadError&) {
    reference = "rejected";
  }
  try {
    s = snap::read_snapshot(text, "fuzz.json");
  } catch (const snap::ReadError& e) {
    const std::string_view m = e.what();
    if (m.rfind("fuzz.json", 0) != 0 || m.find('\n') != std::string_view::npos) __builtin_trap();
    if (reference != "rejected") __builtin_trap();
    return 0;
  }
  const std::string once = snap::to_json(s);
  if (once != reference) __builtin_trap();
  const std::string twice = snap::to_json(snap::read_snapshot(once, "rewritten.json"));
  if (once != twice) __builtin_trap();

  NullBuf buf;
  std::ostream null(&buf);
  const analysis::SiteTable sites(s);
  const auto report = analysis::build_report(s, sites, "fuzz.json");
  analysis::print_report_text(report, s, sites, {}, null);
  analysis::print_report_json(report, s, sites, {}, null);
  analysis::CheckOptions o;
  o.max_leaked_bytes = 0;
  o.max_peak_bytes = 1 << 20;
  o.max_growth = 0;
  o.mark = s.annotations.empty() ? "step" : s.annotations.front().name;
  o.warmup = 0;
  analysis::run_check({{"fuzz.json", s}}, o, null, null);
  o.format = "github";
  analysis::run_check({{"fuzz.json", s}}, o, null, null);
  const auto d = analysis::diff_snapshots(s, "a", s, "b");
  analysis::print_diff_text(d, 5, null);
  analysis::print_diff_json(d, null);
  return 0;
}
