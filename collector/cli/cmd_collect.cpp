// `cumemtrace __collect`: the collector the preload starts for itself under plain LD_PRELOAD.
// It detaches (the application never sees it as a child) and serves one control socket.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdlib>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/log.h"
#include "live/collector_loop.h"
#include "live/output_dir.h"

namespace cumemtrace::cli {

namespace {

struct CollectArgs {
  int control_fd = -1;
  std::string output = ".";
  bool daemonize = false;
  uint64_t max_trace_events = 0;
};

// Plain-preload settings the collector applies itself (it inherits the application's
// environment); a bad value refuses tracing with a message the application prints.
std::string env_settings(collect::SessionOptions& o) {
  if (const char* v = getenv("CUMEMTRACE_SNAPSHOT_EVERY"); v && *v) {
    char* end = nullptr;
    const double s = strtod(v, &end);
    if (*end || !(s >= 0.001 && s <= 1e9)) {
      return fmt::format("invalid CUMEMTRACE_SNAPSHOT_EVERY (expected seconds > 0): {}", v);
    }
    o.snapshot_every_s = s;
  }
  if (const char* v = getenv("CUMEMTRACE_MAX_TRACE_EVENTS"); v && *v) {
    char* end = nullptr;
    errno = 0;
    const unsigned long long n = strtoull(v, &end, 10);
    if (*end || errno || *v == '-') {
      return fmt::format("invalid CUMEMTRACE_MAX_TRACE_EVENTS (expected a count): {}", v);
    }
    o.max_trace_events = n;
  }
  return {};
}

int collect_main(const CollectArgs& a) {
  if (a.daemonize) {
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid > 0) _exit(0);  // the preload reaps this intermediate process at once
    setsid();
  }
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  collect::CollectorOptions opts;
  opts.session.output_dir = a.output;
  opts.session.max_trace_events = a.max_trace_events;
  opts.refuse = collect::prepare_output_dir(a.output);
  // No terminal may be left to read stderr: CUMEMTRACE_LOG_FILE puts records beside the snapshots
  // (so the directory is made first).
  const std::string log_problem = log::init("", a.output);
  if (!log_problem.empty()) spdlog::warn("{}", log_problem);
  spdlog::debug("collector started (pid {}), writing to {}", getpid(), a.output);
  if (opts.refuse.empty()) opts.refuse = env_settings(opts.session);
  collect::Collector c(a.control_fd, opts);
  if (!opts.refuse.empty()) spdlog::debug("refusing to trace: {}", opts.refuse);
  c.run();
  spdlog::debug("collector done");
  return 0;
}

}  // namespace

void add_collect_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<CollectArgs>();
  CLI::App* sub = app.add_subcommand("__collect", "collector started by the preload (internal)");
  sub->group("");  // hidden from --help
  sub->add_option("--control-fd", args->control_fd, "control socket descriptor")->required();
  sub->add_option("--output", args->output, "snapshot directory");
  sub->add_option("--max-trace-events", args->max_trace_events, "keep the newest N trace entries");
  sub->add_flag("--daemonize", args->daemonize, "detach from the caller");
  sub->callback([args, &exit_code] { exit_code = collect_main(*args); });
}

}  // namespace cumemtrace::cli
