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
#include "cli/settings_options.h"
#include "live/bounded_settings.h"
#include "live/collector_loop.h"
#include "live/collector_signals.h"
#include "live/metrics_server.h"
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
// environment), by the settings table's rule; a bad value refuses tracing with a message the
// application prints.
std::string env_settings(collect::CollectorOptions& opts) {
  using settings::Id;
  if (std::string bad = env_problem(); !bad.empty()) return bad;
  collect::SessionOptions& o = opts.session;
  settings::Value v;
  if (settings::parse(settings::row(Id::kSnapshotEvery), settings::from_env(Id::kSnapshotEvery),
                      v)) {
    o.snapshot_every_s = v.seconds;
  }
  if (settings::parse(settings::row(Id::kMaxTraceEvents), settings::from_env(Id::kMaxTraceEvents),
                      v)) {
    o.max_trace_events = v.number;
  }
  collect::BoundedSettings b;
  b.spelled_keep = settings::row(Id::kKeep).variable;
  b.spelled_max_disk = settings::row(Id::kMaxDisk).variable;
  b.spelled_interval = settings::row(Id::kInterval).variable;
  if (const char* text = settings::from_env(Id::kKeep)) b.keep = text;
  if (const char* text = settings::from_env(Id::kMaxDisk)) b.max_disk = text;
  if (const char* text = settings::from_env(Id::kInterval)) b.interval = text;
  return collect::apply_bounded(b, opts);
}

// CUMEMTRACE_METRICS=ADDR:PORT (live/metrics_server.h): a value that is wrong, or an address
// not loopback without CUMEMTRACE_METRICS_PUBLIC=1, refuses tracing (the user asked for
// something else); a port already taken (another process of the same program has its own
// collector) is one line, and this process is traced without gauges.
std::string env_metrics(collect::MetricsServer& m) {
  const char* v = settings::from_env(settings::Id::kMetrics);
  if (!v) return {};
  const char* pub = settings::from_env(settings::Id::kMetricsPublic);
  const std::string why = m.open(v, pub && std::string(pub) == "1");
  if (why.rfind("cannot listen", 0) == 0) {
    fmt::print(stderr, "cumemtrace: CUMEMTRACE_METRICS: {}; this collector serves no metrics\n",
               why);
    return {};
  }
  if (!why.empty()) return fmt::format("invalid CUMEMTRACE_METRICS: {}", why);
  fmt::print(stderr, "cumemtrace: serving metrics at http://{}/metrics\n", m.address());
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
  collect::ignore_collector_signals();  // a stray SIGUSR2 must not lose the traces it holds
  collect::CollectorOptions opts;
  opts.session.output_dir = a.output;
  opts.session.max_trace_events = a.max_trace_events;
  opts.refuse = collect::prepare_output_dir(a.output);
  // No terminal may be left to read stderr: CUMEMTRACE_LOG_FILE puts records beside the snapshots
  // (so the directory is made first).
  const std::string log_problem = log::init("", a.output);
  if (!log_problem.empty()) spdlog::warn("{}", log_problem);
  spdlog::debug("collector started (pid {}), writing to {}", getpid(), a.output);
  if (opts.refuse.empty()) opts.refuse = env_settings(opts);
  collect::MetricsServer metrics;
  if (opts.refuse.empty()) opts.refuse = env_metrics(metrics);
  collect::Collector c(a.control_fd, opts);
  if (!metrics.address().empty()) {
    metrics.start();
    c.set_metrics(&metrics);
  }
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
