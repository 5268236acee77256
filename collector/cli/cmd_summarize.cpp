// `cumemtrace summarize FILE|DIR...`: writes each final snapshot's summary beside it
// (verdicts/process_summary.h: EXE.rankR.PID.json -> EXE.rankR.PID.summary), as the
// collector does at a process's end, for files written without one (older runs, files copied
// without their times, PyTorch's own JSON snapshots), so that `report DIR`, `check DIR` and
// `html DIR` read a few KB per process instead of every snapshot. A directory stands for the
// final snapshots it holds (cli/snapshot_inputs.h). A summary replaces an older summary, never a
// snapshot nor a symlink. One line at the end: how many were written; a file that cannot be read
// or summarised (a pickle has no *.json name to put one beside) is one line, and the exit is 2.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "cli/snapshot_inputs.h"
#include "verdicts/process_summary.h"

namespace cumemtrace::cli {

void add_summarize_command(CLI::App& app, int& exit_code) {
  auto files = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand(
      "summarize",
      "write each final snapshot's summary beside it (NAME.summary beside NAME.json, as `run` does "
      "at a "
      "process's end), so that report/check/html over a directory read a few KB per process");
  cmd->add_option("FILE", *files, "Snapshots (cumemtrace or PyTorch JSON), or directories of them")
      ->required();
  cmd->callback([files, &exit_code] {
    size_t written = 0;
    exit_code = 0;
    try {
      const SnapshotInputs in = read_snapshot_inputs(*files, [&](analysis::LoadedSnapshot& ls) {
        try {
          if (analysis::summary_path_for(ls.path).empty() || ls.path == "-")
            throw std::runtime_error("only a snapshot file named *.json gets a summary beside it");
          analysis::write_summary_file(analysis::summarize_snapshot(ls.snapshot, ls.path), ls.path);
          ++written;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "cumemtrace summarize: %s: %s\n", ls.path.c_str(), e.what());
          exit_code = 2;
        }
        ls.snapshot = {};  // one at a time
      });
      for (const auto& ls : in.files) {
        if (ls.unreadable.empty()) continue;
        std::fprintf(stderr, "cumemtrace summarize: %s\n", ls.unreadable.c_str());
        exit_code = 2;
      }
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cumemtrace summarize: %s\n", e.what());
      exit_code = 2;
    }
    std::fprintf(stderr, "cumemtrace summarize: wrote %zu %s\n", written,
                 written == 1 ? "summary" : "summaries");
  });
}

}  // namespace cumemtrace::cli
