// `cumemtrace __collect`: the collector the preload starts for itself under plain LD_PRELOAD.
// It detaches (the application never sees it as a child) and serves one control socket.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "collector_loop.h"
#include "commands.h"
#include "output_dir.h"

namespace cumemtrace::cli {

namespace {

struct CollectArgs {
  int control_fd = -1;
  std::string output = ".";
  bool daemonize = false;
  uint64_t max_trace_events = 0;
};

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
  collect::Collector c(a.control_fd, opts);
  c.run();
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
