// Contract: each `cumemtrace` subcommand registers itself on the CLI11 app. The callback it
// installs stores the process exit code in `exit_code`: 0 ok, 1 a check failed, 2 bad usage or
// unreadable input (with a one-line message on stderr saying what and where).
#pragma once

namespace CLI {
class App;
}

namespace cumemtrace::cli {

void add_run_command(CLI::App& app, int& exit_code);
void add_collect_command(CLI::App& app, int& exit_code);
void add_report_command(CLI::App& app, int& exit_code);
void add_check_command(CLI::App& app, int& exit_code);
void add_diff_command(CLI::App& app, int& exit_code);
void add_snapshot_command(CLI::App& app, int& exit_code);
void add_html_command(CLI::App& app, int& exit_code);
void add_convert_command(CLI::App& app, int& exit_code);
void add_whatif_command(CLI::App& app, int& exit_code);
void add_summarize_command(CLI::App& app, int& exit_code);

}  // namespace cumemtrace::cli
