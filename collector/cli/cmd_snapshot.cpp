// `cumemtrace snapshot PID`: asks a traced process for an intermediate snapshot without stopping
// it. The process's preload counts SIGUSR2 in its ring and its collector writes
// EXE.PID.request-N.json (EXE.rankN.PID... for a rank of a job) in its output directory. The signal
// is sent only to a process whose ring says that the preload took SIGUSR2 (its memfd is named
// cumemtrace-ring-usr2): an untraced process, one that has not started tracing yet, or one with its
// own SIGUSR2 handler would be killed or misled by it.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include <fmt/format.h>

#include "cli/commands.h"

namespace cumemtrace::cli {

namespace {

int snapshot_main(int pid) {
  if (pid <= 0) {
    fmt::print(stderr, "cumemtrace snapshot: invalid pid {}\n", pid);
    return 2;
  }
  if (kill(pid, 0) != 0) {
    fmt::print(stderr, "cumemtrace snapshot: {}\n",
               errno == ESRCH ? fmt::format("no process with pid {}", pid)
                              : fmt::format("cannot signal pid {}: {}", pid, strerror(errno)));
    return 2;
  }
  std::ifstream maps(fmt::format("/proc/{}/maps", pid));
  if (!maps) {
    fmt::print(stderr, "cumemtrace snapshot: cannot read /proc/{}/maps\n", pid);
    return 2;
  }
  bool ring = false, usr2 = false;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("/memfd:cumemtrace-ring") == std::string::npos) continue;
    ring = true;
    usr2 = usr2 || line.find("/memfd:cumemtrace-ring-usr2") != std::string::npos;
  }
  if (!ring) {
    fmt::print(stderr,
               "cumemtrace snapshot: pid {} is not being traced (not started under cumemtrace, "
               "or no CUDA allocation yet)\n",
               pid);
    return 2;
  }
  if (!usr2) {
    fmt::print(stderr,
               "cumemtrace snapshot: pid {} handles SIGUSR2 itself, so cumemtrace left it alone; "
               "use cumemtrace_snapshot() or --snapshot-every instead\n",
               pid);
    return 2;
  }
  if (kill(pid, SIGUSR2) != 0) {
    fmt::print(stderr, "cumemtrace snapshot: cannot signal pid {}: {}\n", pid, strerror(errno));
    return 2;
  }
  fmt::print(stderr,
             "cumemtrace: asked pid {} for a snapshot; its collector writes "
             "EXE.{}.request-N.json (EXE.rankN.{}... for a rank of a job) "
             "in its output directory\n",
             pid, pid, pid);
  return 0;
}

}  // namespace

void add_snapshot_command(CLI::App& app, int& exit_code) {
  auto pid = std::make_shared<int>(0);
  CLI::App* sub = app.add_subcommand(
      "snapshot", "ask a traced process for a snapshot now, without stopping it (SIGUSR2)");
  sub->add_option("pid", *pid, "process id of the traced process")->required();
  sub->callback([pid, &exit_code] { exit_code = snapshot_main(*pid); });
}

}  // namespace cumemtrace::cli
