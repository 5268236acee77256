#include "verdicts/check.h"

#include <algorithm>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/breakdown_format.h"
#include "analysis/grouping.h"
#include "analysis/rank_identity.h"
#include "io/file_output.h"
#include "snapshot/size_format.h"
#include "verdicts/check_snapshot.h"
#include "verdicts/github.h"
#include "verdicts/junit.h"
#include "verdicts/limits.h"
#include "verdicts/report.h"
#include "verdicts/suppressions.h"

namespace cumemtrace::analysis {

using snap::format_bytes;

namespace {

// A limit of a process's end that no input judged (each that used CUDA was written while its
// process ran) fails: a gate that could not judge never passes.
void fail_end_limits_nobody_judged(const std::vector<LoadedSnapshot>& snaps, const CheckOptions& o,
                                   CheckResult& r) {
  if (!o.range.empty()) return;
  // Inputs that never used CUDA judge nothing either way (their own verdict says so).
  bool any_cuda = false;
  for (const auto& ls : snaps) {
    if (snap::never_used_cuda(ls.snapshot)) continue;
    if (!mid_run_snapshot(ls.snapshot)) return;
    any_cuda = true;
  }
  if (!any_cuda) return;
  for (const auto& l : limit_specs()) {
    if (!l.at_end || !(o.*l.member)) continue;
    Finding f;
    f.snapshot = snaps.front().path;
    f.check = "written-while-running";
    f.severity = Severity::kError;
    f.judged = false;
    f.limit = *(o.*l.member);
    f.message = fmt::format(
        "{} cannot be judged: every snapshot given was written while its process ran; give the "
        "one written at its end (EXE.PID.json), or a completed --range",
        l.flag);
    r.findings.push_back(std::move(f));
  }
}

}  // namespace

std::string check_options_problem(const CheckOptions& o, const std::vector<std::string>& inputs) {
  if (!o.max_growth && !o.mark.empty()) return "--mark is only used with --max-growth";
  if (!o.suppressions.empty()) {
    try {
      load_suppressions(o.suppressions);
    } catch (const SuppressionError& e) {
      return e.what();
    }
  }
  if (!o.junit.empty()) {
    if (o.junit == "-") return "--junit needs a file name, not -";
    return io::output_problem(o.junit, {o.force, inputs});
  }
  return {};
}

CheckResult evaluate_check(const std::vector<LoadedSnapshot>& snaps, const CheckOptions& o) {
  CheckResult r;
  std::vector<Suppression> rules;
  if (!o.suppressions.empty()) rules = load_suppressions(o.suppressions);
  // A job's launcher or helper that never used CUDA beside ranks that did is no failure: the gate
  // judged the ranks.
  const bool any_cuda = std::any_of(snaps.begin(), snaps.end(), [](const LoadedSnapshot& ls) {
    return ls.unreadable.empty() && !snap::never_used_cuda(ls.snapshot);
  });
  for (const auto& ls : snaps) {
    r.snapshots.push_back(ls.path);
    r.readable.push_back(ls.unreadable.empty());
    r.ranks.push_back(ls.unreadable.empty() ? rank_identity(ls.snapshot).describe() : "");
    check_snapshot(ls, o, rules, r, any_cuda);
  }
  fail_end_limits_nobody_judged(snaps, o, r);
  for (const auto& rule : rules) {
    if (rule.hits)
      r.suppressions_used.push_back({rule.source, rule.pattern, rule.hits, rule.bytes});
  }
  return r;
}

void write_check_text(const CheckResult& r, std::ostream& out) {
  std::unordered_map<std::string, std::string> label;
  for (size_t i = 0; i < r.snapshots.size(); ++i) label[r.snapshots[i]] = r.label(i);
  for (const auto& f : r.findings) {
    if (f.severity == Severity::kPass) continue;
    out << fmt::format("{}: {}: {}\n", label[f.snapshot],
                       f.severity == Severity::kError ? "error" : "warning", f.message);
    for (const auto& s : f.stacks) {
      if (!s.title.empty()) out << "  " << s.title << ":\n";
      for (const auto& l : s.lines) out << "    " << l << '\n';
    }
    if (f.stacks_omitted) out << fmt::format("  ... {} more\n", f.stacks_omitted);
  }
  // One verdict per file, then one for the job.
  std::vector<std::string> failed_files;
  for (size_t i = 0; i < r.snapshots.size(); ++i) {
    int passed = 0, failed = 0;
    for (const auto& f : r.findings) {
      if (f.snapshot != r.snapshots[i]) continue;
      passed += f.severity == Severity::kPass;
      failed += f.severity == Severity::kError;
    }
    if (!failed) {
      out << fmt::format("{}: ok: {} passed\n", r.label(i), plural(passed, "check"));
    } else {
      out << fmt::format("{}: FAILED: {} of {} failed\n", r.label(i), failed,
                         plural(static_cast<uint64_t>(passed + failed), "check"));
      failed_files.push_back(r.label(i));
    }
  }
  if (r.snapshots.size() > 1) {
    if (failed_files.empty()) {
      out << fmt::format("job: ok: all {} files passed\n", r.snapshots.size());
    } else {
      std::string who;
      for (const auto& f : failed_files) who += (who.empty() ? "" : "; ") + f;
      out << fmt::format("job: FAILED ({} of {} files): {}\n", failed_files.size(),
                         r.snapshots.size(), who);
    }
  }
  if (!r.suppressions_used.empty()) {
    out << "Suppressions used:\n";
    for (const auto& u : r.suppressions_used) {
      out << fmt::format("  {:>6} {:>12}  {} ({})\n", u.hits, format_bytes(u.bytes), u.pattern,
                         u.source);
    }
  }
  out << fmt::format("cumemtrace check: {} failed, {} passed\n", r.failures(), r.passes());
}

void write_check_json(const CheckResult& r, std::ostream& out) {
  using nlohmann::json;
  json files = json::array();
  json failed_files = json::array();
  for (size_t i = 0; i < r.snapshots.size(); ++i) {
    const std::string& snap = r.snapshots[i];
    json checks = json::array();
    bool ok = true;
    for (const auto& f : r.findings) {
      if (f.snapshot != snap) continue;
      ok = ok && f.severity != Severity::kError;
      json stacks = json::array();
      for (const auto& s : f.stacks) {
        stacks.push_back(
            {{"title", s.title}, {"frames", s.lines}, {"file", s.file}, {"line", s.line}});
      }
      checks.push_back({{"check", f.check},
                        {"device", f.device < 0 ? json(nullptr) : json(f.device)},
                        {"status", f.severity == Severity::kPass    ? "pass"
                                   : f.severity == Severity::kError ? "fail"
                                                                    : "warning"},
                        {"value", f.value},
                        {"limit", f.limit},
                        {"message", f.message},
                        {"stacks", std::move(stacks)},
                        {"stacks_omitted", f.stacks_omitted},
                        {"judged", f.judged}});
    }
    if (!ok) failed_files.push_back(snap);
    files.push_back(
        {{"file", snap},
         {"process", i < r.ranks.size() && !r.ranks[i].empty() ? json(r.ranks[i]) : json(nullptr)},
         {"readable", i >= r.readable.size() || r.readable[i]},
         {"ok", ok},
         {"checks", std::move(checks)}});
  }
  json used = json::array();
  for (const auto& u : r.suppressions_used) {
    used.push_back(
        {{"source", u.source}, {"pattern", u.pattern}, {"hits", u.hits}, {"bytes", u.bytes}});
  }
  json j = {{"ok", r.failures() == 0},
            {"failed", r.failures()},
            {"passed", r.passes()},
            {"job",
             {{"ok", failed_files.empty()},
              {"files", r.snapshots.size()},
              {"failed_files", std::move(failed_files)}}},
            {"files", std::move(files)},
            {"suppressions_used", std::move(used)}};
  out << j.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
}

int run_check(const std::vector<LoadedSnapshot>& snaps, const CheckOptions& o, std::ostream& out,
              std::ostream& err, CheckResult* result) {
  std::vector<std::string> inputs;
  for (const auto& ls : snaps) inputs.push_back(ls.path);
  if (auto problem = check_options_problem(o, inputs); !problem.empty()) {
    err << "cumemtrace check: " << problem << '\n';
    return 2;
  }
  CheckResult r;
  try {
    r = evaluate_check(snaps, o);
  } catch (const SuppressionError& e) {
    err << "cumemtrace check: " << e.what() << '\n';
    return 2;
  } catch (const RangeNotFound& e) {
    err << "cumemtrace check: " << e.what() << '\n';
    return 2;
  }
  if (!o.junit.empty()) {
    try {
      io::write_output_file(o.junit, {o.force, inputs},
                            [&](std::ostream& j) { write_junit(r, j); });
    } catch (const io::OutputFileError& e) {
      err << "cumemtrace check: " << e.what() << '\n';
      return 2;
    }
  }
  if (result) *result = r;
  if (o.format == "json") {
    write_check_json(r, out);
  } else if (o.format == "github") {
    write_github(r, out);
  } else {
    write_check_text(r, out);
  }
  if (!r.all_readable()) return 2;
  return r.failures() ? 1 : 0;
}

}  // namespace cumemtrace::analysis
