// `cumemtrace check FILE...`: the CI gate (see analysis/check.h for the limits and exit codes).
#include <CLI/CLI.hpp>

#include <iostream>

#include "analysis/check.h"
#include "cli/check_options.h"
#include "cli/commands.h"
#include "snapshot/snapshot_input.h"

namespace cumemtrace::cli {

void add_check_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::vector<std::string> files;
    analysis::CheckOptions check;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "check", "Exit 1 when a snapshot breaks a memory limit (leaks, peak, growth between marks)");
  cmd->add_option("FILE", o->files, "Snapshots to check")->required();
  add_check_options(cmd, o->check);
  cmd->callback([o, &exit_code] {
    // Nothing may escape main: whatever is left (out of memory...) is an unreadable input.
    try {
      std::vector<analysis::LoadedSnapshot> snaps;
      for (const auto& f : o->files) {
        try {
          snaps.push_back({f, snap::read_snapshot_any(f)});
        } catch (const snap::ReadError& e) {
          std::cerr << "cumemtrace check: " << e.what() << '\n';
          exit_code = 2;
          return;
        }
      }
      exit_code = analysis::run_check(snaps, o->check, std::cout, std::cerr);
      std::cout.flush();
      if (!std::cout) exit_code = 2;
    } catch (const std::exception& e) {
      std::cerr << "cumemtrace check: " << e.what() << '\n';
      exit_code = 2;
    }
  });
}

}  // namespace cumemtrace::cli
