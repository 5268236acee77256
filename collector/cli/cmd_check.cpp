// `cumemtrace check FILE|DIR...`: the CI gate (see verdicts/check.h for the limits and exit codes).
// Every file is checked, an unreadable one included (its own failed verdict, exit 2); a directory
// stands for the processes whose final snapshots it holds (cli/snapshot_inputs.h).
// `cumemtrace check --list-limits [--format json]` (hidden) prints verdicts/limits.h's table.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/check_options.h"
#include "cli/commands.h"
#include "cli/snapshot_inputs.h"
#include "verdicts/check.h"
#include "verdicts/limits.h"

namespace cumemtrace::cli {

void add_check_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::vector<std::string> files;
    analysis::CheckOptions check;
    bool list_limits = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "check",
      "exit 1 when a snapshot breaks a memory limit (leaks, peaks, growth); over several, one "
      "verdict per file and one for the job");
  cmd->add_option("FILE", o->files,
                  "Snapshots to check, or directories of them (each process's final snapshot)");
  add_check_options(cmd, o->check);
  // Hidden: the limits' table (verdicts/limits.h) for the Python API and the pytest plugin.
  cmd->add_flag("--list-limits", o->list_limits, "")->group("");
  cmd->callback([o, &exit_code] {
    if (o->list_limits) {
      if (o->check.format == "json") {
        analysis::write_limits_json(std::cout);
      } else {
        analysis::write_limits_text(std::cout);
      }
      return;
    }
    if (o->files.empty()) throw CLI::RequiredError("FILE");
    // Nothing may escape main: whatever is left (out of memory...) is an unreadable input.
    try {
      SnapshotInputs in = read_snapshot_inputs(o->files);
      // Each unreadable file's one line on stderr too, where a lone file's has always been.
      for (const auto& ls : in.files)
        if (!ls.unreadable.empty()) std::cerr << "cumemtrace check: " << ls.unreadable << '\n';
      exit_code = analysis::run_check(in.files, o->check, std::cout, std::cerr);
      std::cout.flush();
      if (!std::cout) exit_code = 2;
    } catch (const std::exception& e) {
      std::cerr << "cumemtrace check: " << e.what() << '\n';
      exit_code = 2;
    }
  });
}

}  // namespace cumemtrace::cli
