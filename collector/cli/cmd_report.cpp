// `cumemtrace report FILE`: where a snapshot's memory went (see analysis/report.h).
#include <CLI/CLI.hpp>

#include <iostream>

#include "analysis/report.h"
#include "cli/cli_checks.h"
#include "cli/commands.h"
#include "snapshot/snapshot_input.h"

namespace cumemtrace::cli {

void add_report_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string file;
    std::string format = "text";
    analysis::ReportOptions report;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "report", "Summarize a snapshot: peaks, memory live at exit, top allocation sites, sizes");
  cmd->add_option("FILE", o->file, "Snapshot (cumemtrace JSON, or PyTorch's JSON or pickle)")
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
  cmd->add_option("--range", o->report.range,
                  "Also evaluate the window of the START..END annotation pair NAME (its last "
                  "occurrence): peak and allocations still live at END")
      ->type_name("NAME");
  cmd->callback([o, &exit_code] {
    // Nothing may escape main: whatever is left (out of memory...) is an unreadable input.
    try {
      snap::Snapshot s;
      try {
        s = snap::read_snapshot_any(o->file);
      } catch (const snap::ReadError& e) {
        std::cerr << "cumemtrace report: " << e.what() << '\n';
        exit_code = 2;
        return;
      }
      const analysis::SiteTable sites(s, o->report.full_names);
      analysis::Report r;
      try {
        r = analysis::build_report(s, sites, o->file, o->report.range);
      } catch (const analysis::RangeNotFound& e) {
        std::cerr << "cumemtrace report: " << o->file << ": " << e.what() << '\n';
        exit_code = 2;
        return;
      }
      if (o->format == "json") {
        analysis::print_report_json(r, s, sites, o->report, std::cout);
      } else {
        analysis::print_report_text(r, s, sites, o->report, std::cout);
      }
      std::cout.flush();
      exit_code = std::cout ? 0 : 2;
    } catch (const std::exception& e) {
      std::cerr << "cumemtrace report: " << e.what() << '\n';
      exit_code = 2;
    }
  });
}

}  // namespace cumemtrace::cli
