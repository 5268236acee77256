// `cumemtrace html FILE [-o OUT.html]`: the offline HTML report of a snapshot (see
// viz/html_report.h). Prints where it wrote and how long it took on stderr.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>

#include "cli/cli_checks.h"
#include "cli/commands.h"
#include "cli/one_output.h"
#include "io/output_file.h"
#include "viz/html_report.h"

namespace cumemtrace::cli {

void add_html_command(CLI::App& app, int& exit_code) {
  struct Options {
    std::string input;
    std::string output;
    size_t top = 10;
    size_t points = 2000;
    bool force = false;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "html", "write a self-contained HTML report of a snapshot (opens offline in any browser)");
  cmd->add_option("FILE", opt->input, "Snapshot: cumemtrace or PyTorch JSON, or a PyTorch pickle")
      ->required();
  cmd->add_option("-o,--output", opt->output, "Output file (default: FILE less .json, plus .html)");
  cmd->add_flag("-f,--force", opt->force, "Overwrite OUT.html if it exists (never the input)");
  cmd->add_option("--top", opt->top, "Allocation sites stacked in the charts (the rest: \"other\")")
      ->check(between(1, 50));
  cmd->add_option("--buckets", opt->points, "Time buckets per chart (at most 2 points each)")
      ->check(between(10, 100000));
  cmd->callback([opt, &exit_code] {
    const auto start = std::chrono::steady_clock::now();
    const std::string out =
        opt->output.empty() ? io::default_output_path(opt->input, ".html") : opt->output;
    const io::OutputPolicy policy{opt->force, {opt->input}};
    std::optional<snap::Snapshot> read = read_for_output("html", opt->input, out, policy);
    if (!read) {
      exit_code = 2;
      return;
    }
    const snap::Snapshot& s = *read;
    const auto loaded = std::chrono::steady_clock::now();
    try {
      viz::ReportOptions ro;
      ro.top_sites = opt->top;
      ro.max_buckets = opt->points;
      const auto slash = opt->input.rfind('/');
      const std::string name =
          slash == std::string::npos ? opt->input : opt->input.substr(slash + 1);
      const std::string page = viz::render_html_report(s, name, ro);
      io::write_output(out, policy, [&](std::ostream& o) { o << page; });
      const auto done = std::chrono::steady_clock::now();
      using ms = std::chrono::duration<double, std::milli>;
      std::fprintf(stderr, "cumemtrace html: wrote %s (%zu bytes; read %.0f ms, report %.0f ms)\n",
                   out.c_str(), page.size(), ms(loaded - start).count(), ms(done - loaded).count());
      exit_code = 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cumemtrace html: %s\n", e.what());
      exit_code = 2;
    }
  });
}

}  // namespace cumemtrace::cli
