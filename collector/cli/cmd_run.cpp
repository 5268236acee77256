// `cumemtrace run [options] PROGRAM ARGS...`: starts PROGRAM with the preload, is its collector,
// and gates on limits such as --max-leaked-bytes exactly as `check` does. Options end at the
// program name (`--` is still accepted). The promises a CI job relies on:
//  - every option is validated before the program starts (limits, --mark, the suppressions file
//    parsed, --junit/--verdict-file writable, the output directory writable, the preload usable);
//  - exit status: the program's own when it failed (128+N when signal N killed it), never masked;
//    else --error-exitcode (default 1) when a limit failed, 2 for a problem found only at the end;
//    else 0. A gate that could not judge fails: when limits are given, tracing that cannot start
//    stops before the program runs (exit 2), and a run that leaves no snapshot to judge fails
//    with one line saying why ("no CUDA allocation seen", unless --allow-no-cuda);
//  - without limits, tracing that cannot start is one line and the program runs untraced;
//  - the text verdict goes to stderr; --format json/github go to stdout, or to --verdict-file;
//    -q prints nothing but errors (a passing verdict is silent);
//  - every process traced is judged, however it was started: a program's descendants that lost
//    the inherited control socket (torchrun's workers, anything that closes its descriptors)
//    reach this collector through its rendezvous socket (live/rendezvous.h), and `run` returns
//    only when each of them has ended and its snapshot is written (or its collector said why
//    not). A failing limit on a rank of a job is named with the rank (analysis/rank_identity.h);
//    after the per-process summaries comes one line for the job, and, when any process ran out of
//    memory, the job's first OOM and what the others held then (verdicts/job_oom.h), also when
//    the launcher killed the others;
//  - a program the loader runs in secure mode (setuid: cli/secure_exec.h) is said to be one
//    before it starts: it runs untraced, or with a limit does not run (exit 2).
// It also makes the preload PROGRAM's NVTX injection library (NVTX_INJECTION64_PATH), unless the
// caller already chose one, so that NVTX ranges and marks become snapshot annotations, and puts
// cumemtrace's sitecustomize first on PYTHONPATH so that a Python program's PyTorch
// caching-allocator events are captured too.
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "analysis/frames.h"
#include "analysis/rank_identity.h"
#include "cli/check_options.h"
#include "cli/cli_checks.h"
#include "cli/commands.h"
#include "cli/log.h"
#include "cli/secure_exec.h"
#include "cli/settings_options.h"
#include "io/file_output.h"
#include "live/bounded_settings.h"
#include "live/collector_loop.h"
#include "live/collector_signals.h"
#include "live/output_dir.h"
#include "live/rendezvous.h"
#include "live/summary.h"
#include "snapshot/snapshot.h"
#include "verdicts/check.h"
#include "verdicts/job_oom.h"
#include "verdicts/limits.h"

namespace cumemtrace::cli {

namespace {

struct RunArgs {
  SettingChoices settings;  // the table's rows with a flag (cli/settings_options.h)
  bool no_follow = false;
  bool quiet = false;
  int error_exitcode = 1;
  std::string verdict_file;
  std::vector<std::string> command;
  analysis::CheckOptions check;
};

std::string find_preload() {
  if (const char* p = settings::from_env(settings::Id::kPreloadPath)) return p;
  char self[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return {};
  const std::filesystem::path dir = std::filesystem::path(std::string(self, n)).parent_path();
  for (const auto& candidate : {dir / "../lib/libcumemtrace.so", dir / "libcumemtrace.so"}) {
    std::error_code ec;
    if (std::filesystem::exists(candidate, ec)) {
      return std::filesystem::weakly_canonical(candidate, ec).string();
    }
  }
  return {};
}

// Why `path` cannot be preloaded, or "". LD_PRELOAD splits its list at spaces and colons, and a
// missing or non-ELF file there is only a loader warning: the program would run untraced.
std::string preload_problem(const std::string& path) {
  if (path.empty()) return "preload library libcumemtrace.so not found (set CUMEMTRACE_PRELOAD)";
  if (path.find_first_of(" :\t\n") != std::string::npos) {
    return fmt::format(
        "preload path '{}' contains a space or a colon, which LD_PRELOAD cannot carry", path);
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fmt::format("preload library {}: {}", path, strerror(errno));
  struct stat st {};
  char magic[4] = {};
  const bool elf = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::read(fd, magic, 4) == 4 &&
                   memcmp(magic,
                          "\x7f"
                          "ELF",
                          4) == 0;
  ::close(fd);
  if (!elf) return fmt::format("preload library {}: expected a shared library (ELF file)", path);
  return {};
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

// PyTorch's allocator events: our sitecustomize (lib/cumemtrace/python, next to the preload)
// goes first on PYTHONPATH; it chain-loads any other sitecustomize and attaches to PyTorch's
// caching allocator once the program imports torch (docs/pytorch.md). Not there: nothing to do.
void prepend_python_path(const std::string& preload) {
  const std::filesystem::path dir =
      std::filesystem::path(preload).parent_path() / "cumemtrace" / "python";
  std::error_code ec;
  if (!std::filesystem::exists(dir / "sitecustomize.py", ec)) return;
  const char* old = getenv("PYTHONPATH");
  const std::string path = old && *old ? dir.string() + ":" + old : dir.string();
  setenv("PYTHONPATH", path.c_str(), 1);
}

[[noreturn]] void exec_child(const RunArgs& a, const std::string& preload, int ctl_fd,
                             const std::string& rendezvous, const sigset_t& old_mask) {
  using settings::Id;
  signal(SIGINT, SIG_DFL);
  signal(SIGQUIT, SIG_DFL);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  if (!preload.empty() && ctl_fd >= 0) {
    fcntl(ctl_fd, F_SETFD, 0);  // inherited across exec by the target and its children
    const char* old = getenv("LD_PRELOAD");
    const std::string lp = old && *old ? preload + ":" + old : preload;
    setenv("LD_PRELOAD", lp.c_str(), 1);
    setenv(settings::row(Id::kControlFd).variable, std::to_string(ctl_fd).c_str(), 1);
    if (!rendezvous.empty()) {
      setenv(settings::row(Id::kControlSocket).variable, rendezvous.c_str(), 1);
    } else {
      unsetenv(settings::row(Id::kControlSocket).variable);  // an outer run's: not ours to reach
    }
    // The program may change its directory: the snapshots' is said in full.
    std::error_code ec;
    const std::string output = a.settings.chosen(Id::kOutput);
    setenv(settings::row(Id::kOutput).variable, std::filesystem::absolute(output, ec).c_str(), 1);
    pass_on(a.settings);  // what the user chose by a flag; the rest is the preload's default
    setenv("NVTX_INJECTION64_PATH", preload.c_str(), 0);
    prepend_python_path(preload);
    if (a.no_follow) {
      setenv(settings::row(Id::kFollow).variable, "0", 1);
      setenv(settings::row(Id::kRootPid).variable, std::to_string(getpid()).c_str(), 1);
    }
  }
  std::vector<char*> argv;
  for (const auto& s : a.command) argv.push_back(const_cast<char*>(s.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  const std::string msg =
      fmt::format("cumemtrace: cannot run {}: {}\n", a.command[0], strerror(errno));
  ssize_t w = write(STDERR_FILENO, msg.data(), msg.size());
  (void)w;
  _exit(errno == ENOENT ? 127 : 126);
}

// Without it only processes that keep the inherited descriptor are traced by this run; the
// others get collectors of their own, as under plain LD_PRELOAD.
void open_rendezvous(collect::Rendezvous& rendezvous) {
  if (auto why = rendezvous.open(); !why.empty()) {
    spdlog::warn(
        "no rendezvous socket ({}): processes that close their descriptors are traced by "
        "collectors of their own",
        why);
  }
}

// After the per-process summaries, one line for a job of several processes.
void print_job_summary(const std::vector<collect::WrittenSnapshot>& written) {
  if (written.size() < 2) return;
  std::vector<const snap::Snapshot*> processes;
  for (const auto& w : written) processes.push_back(&w.snapshot);
  fmt::print(stderr, "{}", collect::summarize_job(processes));
}

// A job whose processes ran out of memory: its first OOM, who and why, and what the others held
// then (verdicts/job_oom.h). Said under -q too, as each process's own OOM line is. Verdicts are
// worked out only for the snapshots that hold an OOM.
void print_job_oom(const std::vector<collect::WrittenSnapshot>& written) {
  if (written.size() < 2) return;
  std::vector<std::vector<analysis::OomVerdict>> verdicts(written.size());
  std::vector<analysis::JobOomInput> in;
  for (size_t i = 0; i < written.size(); ++i) {
    const snap::Snapshot& s = written[i].snapshot;
    bool any = false;
    for (const auto& trace : s.device_traces)
      for (const auto& e : trace) any = any || e.action == snap::Action::kOom;
    if (any) {
      const analysis::SiteTable sites(s);
      verdicts[i] = analysis::oom_verdicts(s, sites);
    }
    in.push_back({written[i].path, &s, &verdicts[i], {}});
  }
  const auto first = analysis::first_job_oom(in);
  if (!first) return;
  for (const std::string& line : analysis::job_oom_lines(*first, 10))
    fmt::print(stderr, "cumemtrace: {}\n", line);
}

// A limit that failed on a rank of a job, said with the rank, where the verdict went elsewhere
// (--format json/github, --verdict-file): a user of a job asks which rank. An error line,
// printed under -q too.
void print_failed_ranks(const std::vector<collect::WrittenSnapshot>& written,
                        const analysis::CheckResult& result) {
  for (const auto& w : written) {
    const analysis::RankIdentity id = analysis::rank_identity(w.snapshot);
    if (!id.known()) continue;
    for (const auto& f : result.findings) {
      if (f.snapshot != w.path || f.severity != analysis::Severity::kError) continue;
      fmt::print(stderr, "cumemtrace: {} (pid {}) failed: {}\n", id.describe(),
                 w.snapshot.tool ? w.snapshot.tool->pid : 0, f.message);
    }
  }
}

// Everything the user got wrong, said before an hours-long job starts: "" or the line. Fills the
// collector's settings into `opts`. `program_problem`: a variable the program's side would refuse,
// which stops tracing like any other reason it cannot start.
std::string usage_problem(RunArgs& a, collect::CollectorOptions& opts,
                          std::string& program_problem) {
  using settings::Id;
  uint8_t bad_reader = 0;
  std::string bad = resolve(a.settings, bad_reader);
  if (!bad.empty() && (bad_reader & settings::kCollector)) return bad;
  program_problem = bad;
  const bool gate = analysis::any_limit(a.check);
  std::string usage = analysis::check_options_problem(a.check, {});
  if (usage.empty() && !a.verdict_file.empty()) {
    if (a.verdict_file == a.check.junit) {
      usage = "--verdict-file and --junit name the same file";
    } else if (a.verdict_file != "-") {
      usage = io::output_problem(a.verdict_file, {a.check.force, {}});
    }
  }
  if (usage.empty() && !gate && (!a.verdict_file.empty() || !a.check.junit.empty())) {
    usage =
        fmt::format("--verdict-file and --junit need a limit ({})", analysis::every_limit_flag());
  }
  const SettingChoices& s = a.settings;
  opts.session.max_trace_events = s.get(Id::kMaxTraceEvents).number;
  opts.session.snapshot_every_s =
      s.given(Id::kSnapshotEvery) ? s.get(Id::kSnapshotEvery).seconds : 0;
  collect::BoundedSettings b;
  b.keep = s.text(Id::kKeep);
  b.max_disk = s.text(Id::kMaxDisk);
  b.interval = s.text(Id::kInterval);
  b.spelled_keep = s.spelled(Id::kKeep);
  b.spelled_max_disk = s.spelled(Id::kMaxDisk);
  b.spelled_interval = s.spelled(Id::kInterval);
  if (usage.empty()) usage = collect::apply_bounded(b, opts);
  return usage;
}

// Live gauges: a port that cannot be had is said before the program starts (false: exit 2).
bool open_metrics(const RunArgs& a, collect::MetricsServer& metrics) {
  using settings::Id;
  const std::string& addr = a.settings.text(Id::kMetrics);
  if (addr.empty()) return true;
  const bool is_public = a.settings.get(Id::kMetricsPublic).number == 1;
  if (auto why = metrics.open(addr, is_public); !why.empty()) {
    fmt::print(stderr, "cumemtrace run: --metrics: {}\n", why);
    return false;
  }
  if (!a.quiet || addr.ends_with(":0") || addr == "0") {
    fmt::print(stderr, "cumemtrace: serving metrics at http://{}/metrics\n", metrics.address());
  }
  return true;
}

// SIGCHLD, SIGTERM and SIGHUP arrive through the returned signalfd; Ctrl-C reaches the program
// from the terminal directly, so the launcher itself ignores it and stays to write the snapshot.
// The signals a collector has no use for (live/collector_signals.h: SIGUSR2 meant for the
// program...) arrive there too and are ignored, so that none ends a run holding traces. The
// program gets the caller's mask back before exec.
int block_signals(sigset_t& old_mask) {
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  collect::add_ignored_signals(mask);
  sigprocmask(SIG_BLOCK, &mask, &old_mask);
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  return signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
}

// What was traced, in one line either way, and where to look next.
void print_outcome(const RunArgs& a, const collect::Collector& collector, bool traced, bool gate,
                   const std::string& out_dir) {
  const auto& written = collector.written();
  if (!a.quiet) print_job_summary(written);
  print_job_oom(written);
  std::string untraced;
  if (traced && written.empty()) {
    untraced = collector.refusals().empty()
                   ? std::string("no CUDA allocation seen; no snapshot written")
                   : fmt::format("tracing was refused ({}); no snapshot written",
                                 collector.refusals().front());
  }
  if (!untraced.empty() && (!a.quiet || gate)) fmt::print(stderr, "cumemtrace: {}\n", untraced);
  // A program that never used CUDA (a loop fallen back to the CPU) has no memory to look at:
  // said once, where a gate's verdict does not say it already (check's `cuda-used`).
  const bool used_cuda = std::any_of(written.begin(), written.end(), [](const auto& w) {
    return !snap::never_used_cuda(w.snapshot);
  });
  if (!written.empty() && !used_cuda) {
    if (!a.quiet && !gate)
      fmt::print(stderr,
                 "cumemtrace: no CUDA allocation seen (no device memory event, segment "
                 "or CUDA context); the snapshot records no device memory\n");
    return;
  }
  if (!written.empty() && !a.quiet && ::access(written.front().path.c_str(), F_OK) == 0) {
    // A job's files side by side: report over the directory (its rank table).
    fmt::print(stderr, "cumemtrace: see where the memory went: cumemtrace report {}\n",
               written.size() > 1 ? out_dir : written.front().path);
  }
}

// The gate, on the snapshots just written: the program's own failure comes first (its status is
// never masked), then the same verdict as `cumemtrace check`.
int judge(const RunArgs& a, const collect::Collector& collector, bool traced, int code) {
  const auto& written = collector.written();
  auto gate_failed = [&] { return code != 0 ? code : a.error_exitcode; };
  if (!traced || written.empty()) {
    if (a.check.allow_no_cuda && traced && collector.refusals().empty()) {
      if (!a.quiet) fmt::print(stderr, "cumemtrace: nothing to check (--allow-no-cuda)\n");
      return code;
    }
    fmt::print(stderr, "cumemtrace: {} cannot judge a program that left no snapshot: failed{}\n",
               analysis::given_limit_flags(a.check),
               collector.refusals().empty() ? " (pass --allow-no-cuda if that is expected)" : "");
    return gate_failed();
  }
  std::vector<analysis::LoadedSnapshot> snaps;
  for (const auto& w : written) snaps.push_back({w.path, w.snapshot});
  const bool to_stdout = a.check.format != "text";
  std::ostringstream verdict_text;
  analysis::CheckResult result;
  const int verdict = analysis::run_check(snaps, a.check, verdict_text, std::cerr, &result);
  int status = verdict == 0 ? code : verdict == 1 ? gate_failed() : code != 0 ? code : 2;
  if (!a.verdict_file.empty() && a.verdict_file != "-") {
    try {
      io::write_output_file(a.verdict_file, {a.check.force, {}},
                            [&](std::ostream& o) { o << verdict_text.str(); });
    } catch (const io::OutputFileError& e) {
      fmt::print(stderr, "cumemtrace run: {}\n", e.what());
      if (status == 0) status = 2;
    }
  } else if (verdict != 0 || !a.quiet) {
    std::ostream& o = to_stdout || a.verdict_file == "-" ? std::cout : std::cerr;
    o << verdict_text.str();
    o.flush();
  }
  // The text verdict on stderr names each rank already (check's lines); elsewhere (stdout's JSON,
  // a verdict file) the terminal still gets one line per failing rank.
  if (to_stdout || !a.verdict_file.empty()) print_failed_ranks(written, result);
  return status;
}

// The directories a run creates for its output (the folder and missing parents), removed again,
// deepest first and only while empty, when the run refuses to start the program: a refused run
// leaves nothing behind. keep() once the program runs.
class MadeDirs {
 public:
  explicit MadeDirs(const std::string& dir) {
    std::error_code ec;
    struct stat st {};
    for (std::filesystem::path p = std::filesystem::absolute(dir, ec).lexically_normal();
         !ec && !p.empty() && ::lstat(p.c_str(), &st) != 0 && errno == ENOENT;
         p = p.parent_path()) {
      made_.push_back(p.string());
      if (p == p.parent_path()) break;
    }
  }
  MadeDirs(const MadeDirs&) = delete;
  MadeDirs& operator=(const MadeDirs&) = delete;
  void keep() { made_.clear(); }
  ~MadeDirs() {
    for (const auto& p : made_)
      if (::rmdir(p.c_str()) != 0) break;  // not empty, or not ours after all: left alone
  }

 private:
  std::vector<std::string> made_;
};

int run_main(RunArgs& a) {
  using settings::Id;
  const bool gate = analysis::any_limit(a.check);
  collect::CollectorOptions opts;
  std::string problem;
  if (std::string usage = usage_problem(a, opts, problem); !usage.empty()) {
    fmt::print(stderr, "cumemtrace run: {}\n", usage);
    return 2;
  }
  const std::string output = a.settings.chosen(Id::kOutput);
  std::string preload = find_preload();
  if (problem.empty()) problem = preload_problem(preload);
  if (problem.empty()) problem = secure_exec_problem(a.command.front());
  MadeDirs made(output);
  if (problem.empty()) problem = collect::prepare_output_dir(output);
  // After the directory exists: a relative CUMEMTRACE_LOG_FILE is created inside it.
  if (auto bad = log::init(a.settings.text(Id::kLog), output); !bad.empty()) {
    fmt::print(stderr, "cumemtrace run: {}\n", bad);
    return 2;
  }
  collect::MetricsServer metrics;
  if (!open_metrics(a, metrics)) return 2;
  int ctl[2] = {-1, -1};
  if (problem.empty() && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) != 0) {
    problem = fmt::format("socketpair failed: {}", strerror(errno));
  }
  collect::Rendezvous rendezvous;
  if (problem.empty()) open_rendezvous(rendezvous);
  if (!problem.empty()) {
    if (gate) {
      fmt::print(stderr, "cumemtrace: {}; not running the program: {} needs a trace\n", problem,
                 analysis::given_limit_flags(a.check));
      return 2;
    }
    fmt::print(stderr, "cumemtrace: {}; running the program untraced\n", problem);
    preload.clear();
  }
  std::error_code ec;
  const std::string out_dir = std::filesystem::absolute(output, ec).lexically_normal().string();
  if (!preload.empty() && !a.quiet) {
    fmt::print(stderr, "cumemtrace: writing snapshots to {}\n", out_dir);
  }

  sigset_t old_mask;
  const int sfd = block_signals(old_mask);
  const pid_t child = fork();
  if (child < 0) {
    fmt::print(stderr, "cumemtrace: fork failed: {}\n", strerror(errno));
    return 2;
  }
  if (child == 0) exec_child(a, preload, ctl[1], rendezvous.path(), old_mask);
  made.keep();  // the program runs: its folder stays, whatever it holds at the end
  if (ctl[1] >= 0) ::close(ctl[1]);

  opts.summary = !a.quiet;
  opts.session.output_dir = output;
  collect::Collector collector(ctl[0], opts);
  if (!metrics.address().empty()) {
    metrics.start();  // after the fork: the child has no thread of ours
    collector.set_metrics(&metrics);
  }
  collector.set_direct_child(child);
  collector.set_signal_fd(sfd);
  collector.set_rendezvous_fd(rendezvous.fd());
  collector.run();
  const int code = collector.child_status() ? exit_code_of(*collector.child_status()) : 1;
  print_outcome(a, collector, !preload.empty(), gate, out_dir);
  return gate ? judge(a, collector, !preload.empty(), code) : code;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* sub = app.add_subcommand(
      "run",
      "run PROGRAM with cumemtrace and write one snapshot per traced process: "
      "cumemtrace run [OPTIONS] PROGRAM [ARGS...] (options end at PROGRAM; -- also works)");
  add_setting_options(sub, args->settings);  // -o, --stack-depth, --clock, --keep...
  sub->add_flag("--no-follow", args->no_follow, "trace only PROGRAM itself, not its children");
  sub->add_flag(
      "-q,--quiet", args->quiet,
      "print nothing but errors (a failing verdict is one, and so is an out-of-memory line; a "
      "passing verdict is not)");
  add_check_options(sub, args->check);
  sub->add_option("--error-exitcode", args->error_exitcode,
                  "exit status when a limit fails and the program itself succeeded")
      ->check(between(1, 255))
      ->capture_default_str();
  sub->add_option("--verdict-file", args->verdict_file,
                  "write the verdict (in --format) to this file instead of the terminal")
      ->type_name("FILE");
  sub->add_option("command", args->command, "PROGRAM and its arguments")->required();
  sub->callback([args, &exit_code] { exit_code = run_main(*args); });
}

}  // namespace cumemtrace::cli
