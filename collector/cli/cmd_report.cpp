// `cumemtrace report FILE`: where a snapshot's memory went (see verdicts/report.h); on a bounded
// capture's EXE.PID.intervals.json, its intervals (cli/intervals_report.h).
// `cumemtrace report FILE FILE...` or `report DIR`: the processes side by side first, a job's
// ranks in rank order (verdicts/rank_table.h), then each file's own report with --each. Processes
// are counted by process, files by file: several snapshots of one process (its OOM's beside its
// final one) are one row, the one that holds most of it (process_of_files), the others said. A
// file that cannot be read is one line on stderr; the others are shown and the exit status is 2.
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "analysis/analysed_snapshot.h"
#include "analysis/breakdown_format.h"
#include "cli/cli_checks.h"
#include "cli/commands.h"
#include "cli/intervals_report.h"
#include "cli/snapshot_inputs.h"
#include "io/snapshot_input.h"
#include "snapshot/size_format.h"
#include "verdicts/limits.h"
#include "verdicts/process_summary.h"
#include "verdicts/rank_table.h"
#include "verdicts/report.h"

namespace cumemtrace::cli {

namespace {

struct Opts {
  std::vector<std::string> files;
  std::string format = "text";
  analysis::ReportOptions report;
  bool each = false;
  double skew_percent = 10;
  uint64_t skew_bytes = 64ull << 20;
};

// Of files that are snapshots of one process (the same host, pid and start: an OOM's or a
// periodic snapshot beside its final one), the one that holds most of it: written at its end over
// one written while it ran, else the one with more events recorded; the first given on a tie.
// Returns, per file, the index of the file kept for its process (its own index when kept). A file
// without a tool section (PyTorch's own) is a process of its own.
template <typename Built>
std::vector<size_t> process_of_files(const std::vector<Built>& built) {
  std::vector<size_t> kept(built.size());
  std::map<std::tuple<std::string, int, int64_t>, size_t> first;  // process -> file kept so far
  for (size_t i = 0; i < built.size(); ++i) {
    kept[i] = i;
    const auto& t = built[i].summary ? built[i].summary->tool : std::nullopt;
    if (!t) continue;
    auto [it, fresh] = first.try_emplace({t->hostname, t->pid, t->start_time_us}, i);
    if (fresh) continue;
    const auto& k = *built[it->second].summary->tool;
    const bool better = analysis::mid_run_reason(k.reason) != analysis::mid_run_reason(t->reason)
                            ? analysis::mid_run_reason(k.reason)
                            : t->events_total > k.events_total;
    if (better) it->second = i;
  }
  for (size_t i = 0; i < built.size(); ++i) {
    const auto& t = built[i].summary ? built[i].summary->tool : std::nullopt;
    if (t) kept[i] = first.at({t->hostname, t->pid, t->start_time_us});
  }
  return kept;
}

// Reports many files: the rank table, then (--each) every file's report. A process is read as
// its summary (verdicts/process_summary.h) where a current one lies beside its snapshot; else its
// snapshot is read, its report built and summarised, and (unless --each prints them all, or it
// came from stdin) the snapshot dropped. The rank table reads a full snapshot again only for the
// rows it shows in detail (verdicts/rank_table.h RankInput). --each and --range need every
// snapshot, so they read no summary. Returns the exit code.
int report_many(const Opts& o) {
  const bool summaries = !o.each && o.report.range.empty();
  struct Built {
    std::string file;
    std::unique_ptr<analysis::SiteTable> sites;  // --each only
    std::optional<analysis::Report> report;      // --each only
    std::shared_ptr<const analysis::ProcessSummary> summary;
    const snap::Snapshot* whole = nullptr;  // the full snapshot, when it stayed in memory
  };
  std::vector<std::optional<analysis::Report>> reports;  // by file read, in order (--each)
  std::vector<std::string> report_errors;
  SnapshotInputs in = read_snapshot_inputs(
      o.files,
      [&](analysis::LoadedSnapshot& ls) {
        const analysis::SiteTable sites(ls.snapshot, o.report.full_names);
        try {
          // One analysed view for its report and its summary: each device replayed once.
          const analysis::AnalysedSnapshot view(ls.snapshot);
          analysis::Report r =
              analysis::build_report(view, sites, ls.path, o.report.range, o.report.module_depth);
          analysis::SummarizedFile file;
          if (auto f = analysis::summarized_file(ls.path)) file = std::move(*f);
          ls.summary = std::make_shared<const analysis::ProcessSummary>(
              analysis::summarize_process(view, r, std::move(file)));
          reports.push_back(o.each ? std::optional(std::move(r)) : std::nullopt);
          report_errors.emplace_back();
        } catch (const analysis::RangeNotFound& e) {
          reports.emplace_back();
          report_errors.push_back(e.what());
        }
        // Its summary is all the table needs; the snapshot is read again where it is shown.
        if (!o.each && ls.path != "-") ls.snapshot = {};
      },
      summaries);
  std::vector<Built> built;
  bool bad = false;
  size_t k = 0;  // without summaries, every readable file was read through the callback above
  for (auto& ls : in.files) {
    if (!ls.unreadable.empty()) {
      std::cerr << "cumemtrace report: " << ls.unreadable << '\n';
      bad = true;
      continue;
    }
    const size_t at = summaries ? 0 : k++;
    if (!summaries && !reports[at] && !report_errors[at].empty()) {
      std::cerr << "cumemtrace report: " << ls.path << ": " << report_errors[at] << '\n';
      bad = true;
      continue;
    }
    Built b;
    b.file = ls.path;
    b.summary = ls.summary;
    if (!summaries) b.report = std::move(reports[at]);
    if (o.each || ls.path == "-") b.whole = &ls.snapshot;
    if (o.each) b.sites = std::make_unique<analysis::SiteTable>(ls.snapshot, o.report.full_names);
    built.push_back(std::move(b));
  }
  // One row per process (process_of_files); the files left out are said, and --each still
  // reports each of them.
  const std::vector<size_t> kept = process_of_files(built);
  std::vector<std::pair<size_t, size_t>> left_out;  // (file left out, the file kept instead)
  for (size_t i = 0; i < built.size(); ++i)
    if (kept[i] != i) left_out.emplace_back(i, kept[i]);
  std::vector<analysis::RankInput> inputs;
  for (size_t i = 0; i < built.size(); ++i) {
    if (kept[i] != i) continue;
    auto& b = built[i];
    analysis::SnapshotLoader load;
    if (b.whole) {
      load = analysis::in_memory(*b.whole);
    } else {
      // Read again as the first pass read it: PyTorch's block bytes labelled.
      load = analysis::from_file([path = b.file] { return read_snapshot_for_views(path); });
    }
    inputs.push_back({b.file, b.summary.get(), std::move(load), b.report ? &*b.report : nullptr});
  }
  const analysis::RankTable table = analysis::build_rank_table(
      inputs, {o.skew_percent / 100.0, o.skew_bytes}, {o.report.full_names});
  if (o.format == "json") {
    nlohmann::json j;
    j["ranks"] = analysis::rank_table_json(table, o.report.top);
    j["skipped_snapshots"] = in.skipped;
    nlohmann::json same = nlohmann::json::array();
    for (const auto& [i, k] : left_out)
      same.push_back({{"file", built[i].file}, {"same_process_as", built[k].file}});
    j["same_process_files"] = std::move(same);
    nlohmann::json unreadable = nlohmann::json::array();
    for (const auto& ls : in.files)
      if (!ls.unreadable.empty())
        unreadable.push_back({{"file", ls.path}, {"error", ls.unreadable}});
    j["unreadable"] = std::move(unreadable);
    if (o.each) {
      nlohmann::json reports = nlohmann::json::array();
      for (const auto& b : built)
        reports.push_back(
            analysis::report_json(*b.report, b.sites->snapshot(), *b.sites, o.report));
      j["reports"] = std::move(reports);
    }
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << '\n';
  } else {
    std::cout << fmt::format("cumemtrace report: {} of {}",
                             analysis::plural(inputs.size(), "process"),
                             analysis::plural(in.files.size(), "file"));
    for (const auto& [i, k] : left_out)
      std::cout << fmt::format(" ({} left out: {} again, whose {} holds more of it)", built[i].file,
                               analysis::process_name(*built[i].summary), built[k].file);
    if (in.skipped)
      std::cout << fmt::format(
          " ({} written while a process ran left out: the same processes "
          "earlier)",
          analysis::plural(in.skipped, "snapshot"));
    std::cout << '\n';
    analysis::print_rank_table_text(table, o.report.top, std::cout);
    if (!o.each && !built.empty())
      std::cout << "\n(each file's own report: cumemtrace report --each, or report FILE)\n";
    for (const auto& b : built) {
      if (!o.each) break;
      std::cout << '\n';
      analysis::print_report_text(*b.report, b.sites->snapshot(), *b.sites, o.report, std::cout);
    }
  }
  std::cout.flush();
  if (!std::cout) return 2;
  return bad ? 2 : 0;
}

int report_one(const Opts& o) {
  snap::Snapshot s;
  try {
    s = read_snapshot_for_views(o.files.front());
  } catch (const snap::ReadError& e) {
    std::cerr << "cumemtrace report: " << e.what() << '\n';
    return 2;
  }
  const std::string& file = o.files.front();
  const analysis::SiteTable sites(s, o.report.full_names);
  const analysis::AnalysedSnapshot view(s);  // each device replayed once for every section
  analysis::Report r;
  try {
    r = analysis::build_report(view, sites, file, o.report.range, o.report.module_depth);
  } catch (const analysis::RangeNotFound& e) {
    std::cerr << "cumemtrace report: " << file << ": " << e.what() << '\n';
    return 2;
  }
  if (o.format == "json") {
    analysis::print_report_json(r, s, sites, o.report, std::cout);
  } else {
    analysis::print_report_text(r, s, sites, o.report, std::cout);
  }
  std::cout.flush();
  return std::cout ? 0 : 2;
}

}  // namespace

void add_report_command(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "report",
      "summarize a snapshot: peaks, memory live at exit, top allocation sites, sizes; several, or "
      "a directory: the processes side by side (a job's ranks)");
  cmd->add_option("FILE", o->files,
                  "Snapshot (cumemtrace JSON, or PyTorch's JSON or pickle); several, or a "
                  "directory of them: the processes side by side (a job's ranks)")
      ->required();
  cmd->add_option("--format", o->format, "Output format")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--top", o->report.top, "Rows per table")
      ->capture_default_str()
      ->check(between(1, 1000));
  cmd->add_option("--frames", o->report.frames, "Program frames shown per stack")
      ->capture_default_str()
      ->check(between(1, 1000));
  cmd->add_flag("--full-names", o->report.full_names,
                "Show C++ function names as recorded (default: argument and template lists "
                "folded to (...) and <...>)");
  cmd->add_flag("--small-lines", o->report.small_lines,
                "PyTorch ledger: also list the (site, category) lines under 1 KiB (left out by "
                "default; the per-category sums always count them)");
  cmd->add_option("--range", o->report.range,
                  "Also evaluate the window of the START..END annotation pair NAME (its last "
                  "occurrence): peak and allocations still live at END")
      ->type_name("NAME");
  cmd->add_option("--module-depth", o->report.module_depth,
                  "PyTorch runs with module names: the by-module table's depth (1: the model's "
                  "top-level modules; each row sums its submodules)")
      ->capture_default_str()
      ->check(between(1, 64));
  cmd->add_flag("--each", o->each,
                "Many files: after the processes side by side, each file's own report");
  cmd->add_option("--skew-percent", o->skew_percent,
                  "Many files: flag a process whose value differs from the median by more than "
                  "this share of it (and by more than --skew-bytes)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option_function<std::string>(
         "--skew-bytes",
         [o](const std::string& v) {
           auto b = snap::parse_bytes(v);
           if (!b)
             throw CLI::ValidationError(
                 "--skew-bytes",
                 "expected a size such as 0, 4096, 12MiB or 1.5GB, got '" + v + "'");
           o->skew_bytes = *b;
         },
         "Many files: flag a process whose value differs from the median by more than SIZE "
         "(and by more than --skew-percent; default 64MiB)")
      ->type_name("SIZE");
  cmd->callback([o, &exit_code] {
    // Nothing may escape main: whatever is left (out of memory...) is an unreadable input.
    try {
      std::error_code ec;
      const bool one =
          o->files.size() == 1 &&
          (o->files.front() == "-" || !std::filesystem::is_directory(o->files.front(), ec));
      if (one && is_intervals_file(o->files.front())) {
        exit_code = print_intervals(o->files.front(), o->format, std::cout, std::cerr) ? 0 : 2;
        return;
      }
      if (one) {
        exit_code = report_one(*o);
        return;
      }
      exit_code = report_many(*o);
      // A bounded capture's directory: its interval summaries after the processes.
      for (const auto& f : o->files) {
        if (o->format != "text" || !std::filesystem::is_directory(f, ec)) continue;
        for (const auto& summary : intervals_files_in(f)) {
          std::cout << '\n';
          if (!print_intervals(summary, o->format, std::cout, std::cerr)) exit_code = 2;
        }
      }
    } catch (const std::exception& e) {
      std::cerr << "cumemtrace report: " << e.what() << '\n';
      exit_code = 2;
    }
  });
}

}  // namespace cumemtrace::cli
