#include <CLI/CLI.hpp>

#include <cstdio>

#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"cumemtrace: where a program's GPU memory goes"};
  app.set_version_flag("--version", CUMEMTRACE_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;
  cumemtrace::cli::add_run_command(app, exit_code);
  cumemtrace::cli::add_collect_command(app, exit_code);
  cumemtrace::cli::add_report_command(app, exit_code);
  cumemtrace::cli::add_check_command(app, exit_code);
  cumemtrace::cli::add_diff_command(app, exit_code);
  cumemtrace::cli::add_snapshot_command(app, exit_code);
  cumemtrace::cli::add_html_command(app, exit_code);
  cumemtrace::cli::add_convert_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  return exit_code;
}
