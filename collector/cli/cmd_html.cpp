// `cumemtrace html FILE | BASE NEW | DIR | FILE FILE FILE... [-o OUT.html]`: the offline HTML
// page that answers the question the arguments ask (viz/html_report.h): one snapshot's report;
// two snapshots' diff (`diff --format html`'s page); a directory, or more than two files (or
// two with --job), a job's processes side by side (`report DIR`'s rank table, each process's
// chart). Prints where it wrote and how long it took on stderr.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "analysis/breakdown_format.h"
#include "cli/cli_checks.h"
#include "cli/commands.h"
#include "cli/one_output.h"
#include "cli/snapshot_inputs.h"
#include "io/output_file.h"
#include "io/snapshot_input.h"
#include "verdicts/diff.h"
#include "verdicts/process_summary.h"
#include "verdicts/rank_table.h"
#include "verdicts/report.h"
#include "viz/html_report.h"

namespace cumemtrace::cli {

namespace {

struct Options {
  std::vector<std::string> inputs;
  std::string output;
  size_t top = 10;
  size_t points = 2000;
  bool force = false;
  bool job = false;
};

std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool is_directory(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_directory(path, ec);
}

// The page of a job: `report DIR`'s rank table from the processes' summaries (read where current,
// else built as each snapshot is read, which is then dropped), each charted process's snapshot
// read again (viz/html_report.h says which are charted).
std::string job_page(const Options& o, SnapshotInputs& in, int& exit_code) {
  std::vector<std::pair<std::string, std::string>> unreadable;
  std::vector<analysis::RankInput> inputs;
  for (const auto& ls : in.files) {
    if (!ls.unreadable.empty()) {
      // Shown on the page and said here; the page is still written, the exit says it is partial.
      std::fprintf(stderr, "cumemtrace html: %s\n", ls.unreadable.c_str());
      unreadable.emplace_back(ls.path, ls.unreadable);
      exit_code = 2;
      continue;
    }
    analysis::SnapshotLoader load;
    if (ls.path == "-") {
      load = analysis::in_memory(ls.snapshot);
    } else {
      load = analysis::from_file([path = ls.path] { return read_snapshot_for_views(path); });
    }
    inputs.push_back({ls.path, ls.summary.get(), std::move(load)});
  }
  const auto table = analysis::build_rank_table(inputs, {});
  std::string name = base_name(o.inputs.front());
  if (o.inputs.size() > 1) name += " and " + analysis::plural(o.inputs.size() - 1, "other");
  return viz::render_job_html(table, inputs, name, in.skipped, unreadable, o.top);
}

}  // namespace

void add_html_command(CLI::App& app, int& exit_code) {
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "html",
      "write a self-contained HTML page (opens offline in any browser): a snapshot's report; "
      "BASE NEW: their diff; a directory or more files: a job's processes side by side");
  cmd->add_option("FILE", opt->inputs,
                  "Snapshot (cumemtrace or PyTorch JSON, or a PyTorch pickle); two: BASE NEW, "
                  "their diff; a directory or more than two: a job's processes")
      ->required();
  cmd->add_option("-o,--output", opt->output,
                  "Output file (default: FILE less .json, plus .html; NEW plus .diff.html; DIR "
                  "plus .html)");
  cmd->add_flag("-f,--force", opt->force, "Overwrite OUT.html if it exists (never an input)");
  cmd->add_flag("--job", opt->job, "Two files: the processes side by side, not their diff");
  cmd->add_option("--top", opt->top, "Allocation sites stacked in the charts (the rest: \"other\")")
      ->check(between(1, 50));
  cmd->add_option("--buckets", opt->points, "Time buckets per chart (at most 2 points each)")
      ->check(between(10, 100000));
  cmd->callback([opt, &exit_code] {
    const auto start = std::chrono::steady_clock::now();
    const auto& in = opt->inputs;
    const bool one = in.size() == 1 && !is_directory(in.front());
    const bool diff = in.size() == 2 && !opt->job && !is_directory(in[0]) && !is_directory(in[1]);
    std::string out = opt->output;
    if (out.empty()) {
      if (one)
        out = io::default_output_path(in.front(), ".html");
      else if (diff)
        out = io::default_output_path(in[1], ".diff.html");
      else if (is_directory(in.front())) {
        std::string dir = in.front();
        while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
        out = dir + ".html";
      } else {
        out = io::default_output_path(in.front(), ".job.html");
      }
    }
    io::OutputPolicy policy{opt->force, in};
    if (!one) {
      // Checked before the (long) reads, as for one file (one_output.h).
      const std::string why = io::output_problem(out, policy);
      if (!why.empty()) {
        std::fprintf(stderr, "cumemtrace html: %s\n", why.c_str());
        exit_code = 2;
        return;
      }
    }
    try {
      std::string page;
      std::chrono::steady_clock::time_point loaded;
      if (one) {
        std::optional<snap::Snapshot> read = read_for_output("html", in.front(), out, policy);
        if (!read) {
          exit_code = 2;
          return;
        }
        loaded = std::chrono::steady_clock::now();
        viz::ReportOptions ro;
        ro.top_sites = opt->top;
        ro.max_buckets = opt->points;
        page = viz::render_html_report(*read, base_name(in.front()), ro);
        exit_code = 0;
      } else if (diff) {
        snap::Snapshot a, b;
        try {
          // The same reader as `diff`: the page's numbers are diff --format json's.
          a = read_snapshot_for_views(in[0]);
          b = read_snapshot_for_views(in[1]);
        } catch (const snap::ReadError& e) {
          std::fprintf(stderr, "cumemtrace html: %s\n", e.what());
          exit_code = 2;
          return;
        }
        loaded = std::chrono::steady_clock::now();
        page = viz::render_diff_html(analysis::diff_snapshots(a, in[0], b, in[1]),
                                     base_name(in[0]) + " vs " + base_name(in[1]));
        exit_code = 0;
      } else {
        // Each process as its summary (verdicts/process_summary.h), built here where none is
        // current; its snapshot is read again only for its chart.
        SnapshotInputs inputs = read_snapshot_inputs(
            in,
            [](analysis::LoadedSnapshot& ls) {
              ls.summary = std::make_shared<const analysis::ProcessSummary>(
                  analysis::summarize_snapshot(ls.snapshot, ls.path));
              if (ls.path != "-") ls.snapshot = {};
            },
            true);
        // A directory's snapshots are inputs too: the page never lands on one of them.
        for (const auto& ls : inputs.files) policy.inputs.push_back(ls.path);
        loaded = std::chrono::steady_clock::now();
        exit_code = 0;
        page = job_page(*opt, inputs, exit_code);
      }
      io::write_output(out, policy, [&](std::ostream& o) { o << page; });
      const auto done = std::chrono::steady_clock::now();
      using ms = std::chrono::duration<double, std::milli>;
      std::fprintf(stderr, "cumemtrace html: wrote %s (%zu bytes; read %.0f ms, report %.0f ms)\n",
                   out.c_str(), page.size(), ms(loaded - start).count(), ms(done - loaded).count());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cumemtrace html: %s\n", e.what());
      exit_code = 2;
    }
  });
}

}  // namespace cumemtrace::cli
