// `cumemtrace snapshot PID`: asks a traced process for an intermediate snapshot without stopping
// it. The process's preload counts SIGUSR2 in its ring and its collector writes
// EXE.PID.request-N.json (EXE.rankN.PID... for a rank of a job) in its output directory. The signal
// is sent only to a process whose own ring says that the preload took SIGUSR2 (a memfd named
// cumemtrace-ring-usr2.PID with that process's pid: wire/control_protocol.h): an untraced process,
// one that has not started tracing yet, or one with its own SIGUSR2 handler would be killed or
// misled by it. A collector maps its processes' rings too (`cumemtrace run`, whose argv names the
// program, is the first pid `pgrep -f` finds): it is refused, naming the processes it traces.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "cli/commands.h"
#include "control_protocol.h"

namespace cumemtrace::cli {

namespace {

struct RingName {
  long producer = 0;  // the pid in the name: the process that made the ring
  bool usr2 = false;
};

// A /proc/PID/maps line's ring, named by wire/control_protocol.h's rule; nullopt for any other
// mapping.
std::optional<RingName> parse_ring(const std::string& line) {
  const std::string memfd = "/memfd:";
  const size_t at = line.find(memfd);
  if (at == std::string::npos) return std::nullopt;
  std::string_view name(line);
  name.remove_prefix(at + memfd.size());
  RingName r;
  for (std::string_view base : {wire::kRingNameUsr2, wire::kRingName}) {
    if (name.substr(0, base.size()) != base || name.substr(base.size(), 1) != ".") continue;
    name.remove_prefix(base.size() + 1);
    const char* end = name.data() + name.size();
    const auto [p, ec] = std::from_chars(name.data(), end, r.producer);
    if (ec != std::errc() || r.producer <= 0 || (p != end && *p != ' ')) return std::nullopt;
    r.usr2 = base == wire::kRingNameUsr2;
    return r;
  }
  return std::nullopt;
}

// The pids `pid` has in every pid namespace it belongs to (/proc/PID/status's NSpid): a ring's
// name holds the pid its process saw, which is another where it runs in a container.
std::set<long> own_pids(int pid) {
  std::set<long> pids{pid};
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("NSpid:", 0) != 0) continue;
    std::istringstream in(line.substr(6));
    for (long p; in >> p;) pids.insert(p);
  }
  return pids;
}

// " (python3.12)": the process's name, or "" when it cannot be read.
std::string comm_of(long pid) {
  std::ifstream in(fmt::format("/proc/{}/comm", pid));
  std::string name;
  if (!std::getline(in, name) || name.empty()) return {};
  return fmt::format(" ({})", name);
}

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
  const std::set<long> self = own_pids(pid);
  bool own = false, usr2 = false;
  std::set<long> others;  // producers of the rings a collector maps
  for (std::string line; std::getline(maps, line);) {
    const auto ring = parse_ring(line);
    if (!ring) continue;
    if (self.count(ring->producer)) {
      own = true;
      usr2 = usr2 || ring->usr2;
    } else {
      others.insert(ring->producer);
    }
  }
  if (!own && !others.empty()) {
    std::string names;
    for (long p : others) names += fmt::format("{}{}{}", names.empty() ? "" : ", ", p, comm_of(p));
    fmt::print(stderr,
               "cumemtrace snapshot: pid {} is cumemtrace's collector, not a traced process; it "
               "traces {} {}: ask {}: cumemtrace snapshot {}\n",
               pid, others.size() == 1 ? "pid" : "pids", names,
               others.size() == 1 ? "it" : "one of them", *others.begin());
    return 2;
  }
  if (!own) {
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
