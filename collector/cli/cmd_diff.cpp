// `cumemtrace diff BASE NEW`: peak and live-at-exit changes for regression review; --format html
// writes the same document as a self-contained page on stdout (viz/html_report.h).
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/cli_checks.h"
#include "cli/commands.h"
#include "cli/snapshot_inputs.h"
#include "io/snapshot_input.h"
#include "verdicts/diff.h"
#include "viz/html_report.h"

namespace cumemtrace::cli {

void add_diff_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string base, now;
    std::string format = "text";
    size_t top = 20;
    int module_depth = 2;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "diff", "compare two snapshots: peak and live-at-exit change per device and per site");
  cmd->add_option("BASE", o->base, "Baseline snapshot")->required();
  cmd->add_option("NEW", o->now, "Snapshot to compare against the baseline")->required();
  cmd->add_option("--format", o->format, "Output format")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json", "html"}));
  cmd->add_option("--top", o->top, "Changed sites shown")
      ->capture_default_str()
      ->check(between(1, 1000));
  cmd->add_option("--module-depth", o->module_depth,
                  "PyTorch runs with module names: the by-module comparison's depth")
      ->capture_default_str()
      ->check(between(1, 64));
  cmd->callback([o, &exit_code] {
    // Nothing may escape main: whatever is left (out of memory...) is an unreadable input.
    try {
      snap::Snapshot a, b;
      try {
        a = read_snapshot_for_views(o->base);
        b = read_snapshot_for_views(o->now);
      } catch (const snap::ReadError& e) {
        std::cerr << "cumemtrace diff: " << e.what() << '\n';
        exit_code = 2;
        return;
      }
      const auto d = analysis::diff_snapshots(a, o->base, b, o->now, o->module_depth);
      if (o->format == "json") {
        analysis::print_diff_json(d, std::cout);
      } else if (o->format == "html") {
        auto name = [](const std::string& p) { return p.substr(p.rfind('/') + 1); };
        std::cout << viz::render_diff_html(d, name(o->base) + " vs " + name(o->now));
      } else {
        analysis::print_diff_text(d, o->top, std::cout);
      }
      std::cout.flush();
      exit_code = std::cout ? 0 : 2;
    } catch (const std::exception& e) {
      std::cerr << "cumemtrace diff: " << e.what() << '\n';
      exit_code = 2;
    }
  });
}

}  // namespace cumemtrace::cli
