// `cumemtrace run [options] -- CMD ARGS...`: starts CMD with the preload, is its collector, and
// exits with CMD's exit status (128+N when a signal N killed it), or with `check`'s verdict (1, or
// 2 for bad check options) when limits such as --max-leaked-bytes are given and one fails. When
// tracing cannot work (no preload library, unwritable output directory) it says so in one line and
// runs CMD untraced. It also makes the preload CMD's NVTX injection library
// (NVTX_INJECTION64_PATH), unless the caller already chose one, so that NVTX ranges and marks
// become snapshot annotations, and puts cumemtrace's sitecustomize first on PYTHONPATH so that a
// Python program's PyTorch caching-allocator events are captured too.
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "analysis/check.h"
#include "collector_loop.h"
#include "commands.h"
#include "output_dir.h"

namespace cumemtrace::cli {

namespace {

struct RunArgs {
  std::string output = ".";
  unsigned stack_depth = 32;
  unsigned buffer_mb = 8;
  uint64_t max_trace_events = 0;
  double snapshot_every = 0;
  bool no_follow = false;
  bool quiet = false;
  std::vector<std::string> command;
  analysis::CheckOptions check;
};

bool has_limits(const analysis::CheckOptions& c) {
  return c.max_leaked_bytes || c.max_peak_bytes || c.max_growth;
}

std::string find_preload() {
  if (const char* p = getenv("CUMEMTRACE_PRELOAD")) return p;
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
                             const sigset_t& old_mask) {
  signal(SIGINT, SIG_DFL);
  signal(SIGQUIT, SIG_DFL);
  sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  if (!preload.empty() && ctl_fd >= 0) {
    fcntl(ctl_fd, F_SETFD, 0);  // inherited across exec by the target and its children
    const char* old = getenv("LD_PRELOAD");
    const std::string lp = old && *old ? preload + ":" + old : preload;
    setenv("LD_PRELOAD", lp.c_str(), 1);
    setenv("CUMEMTRACE_CONTROL_FD", std::to_string(ctl_fd).c_str(), 1);
    std::error_code ec;
    setenv("CUMEMTRACE_OUTPUT", std::filesystem::absolute(a.output, ec).c_str(), 1);
    setenv("CUMEMTRACE_STACK_DEPTH", std::to_string(a.stack_depth).c_str(), 1);
    setenv("CUMEMTRACE_BUFFER_MB", std::to_string(a.buffer_mb).c_str(), 1);
    setenv("NVTX_INJECTION64_PATH", preload.c_str(), 0);
    prepend_python_path(preload);
    if (a.no_follow) {
      setenv("CUMEMTRACE_FOLLOW", "0", 1);
      setenv("CUMEMTRACE_ROOT_PID", std::to_string(getpid()).c_str(), 1);
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

int run_main(const RunArgs& a) {
  std::string preload = find_preload();
  std::string problem;
  if (preload.empty()) {
    problem = "preload library libcumemtrace.so not found (set CUMEMTRACE_PRELOAD)";
  } else {
    problem = collect::prepare_output_dir(a.output);
  }
  if (!problem.empty()) {
    fmt::print(stderr, "cumemtrace: {}; running the program untraced\n", problem);
    preload.clear();
  }

  int ctl[2] = {-1, -1};
  if (!preload.empty() && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) != 0) {
    fmt::print(stderr, "cumemtrace: socketpair failed: {}; running the program untraced\n",
               strerror(errno));
    preload.clear();
  }

  // SIGCHLD, SIGTERM and SIGHUP arrive through a signalfd; Ctrl-C reaches the program from the
  // terminal directly, so the launcher itself ignores it and stays to write the snapshot.
  sigset_t mask, old_mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGCHLD);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGHUP);
  sigprocmask(SIG_BLOCK, &mask, &old_mask);
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  const int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);

  const pid_t child = fork();
  if (child < 0) {
    fmt::print(stderr, "cumemtrace: fork failed: {}\n", strerror(errno));
    return 2;
  }
  if (child == 0) exec_child(a, preload, ctl[1], old_mask);
  if (ctl[1] >= 0) ::close(ctl[1]);

  collect::CollectorOptions opts;
  opts.summary = !a.quiet;
  opts.session.output_dir = a.output;
  opts.session.max_trace_events = a.max_trace_events;
  opts.session.snapshot_every_s = a.snapshot_every;
  collect::Collector collector(ctl[0], opts);
  collector.set_direct_child(child);
  collector.set_signal_fd(sfd);
  collector.run();
  const int code = collector.child_status() ? exit_code_of(*collector.child_status()) : 1;
  if (!has_limits(a.check)) return code;
  // The same gate as `cumemtrace check`, on the snapshots just written.
  std::vector<analysis::LoadedSnapshot> snaps;
  for (const auto& w : collector.written()) snaps.push_back({w.path, w.snapshot});
  const int verdict = analysis::run_check(snaps, a.check, std::cerr);
  return verdict != 0 ? verdict : code;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* sub = app.add_subcommand(
      "run", "run a program with cumemtrace and write one snapshot per traced process");
  sub->add_option("-o,--output", args->output, "directory for snapshots (created if missing)")
      ->capture_default_str();
  sub->add_option("--stack-depth", args->stack_depth, "native frames per event, 0 disables")
      ->check(CLI::Range(0, 128))
      ->capture_default_str();
  sub->add_option("--buffer-mb", args->buffer_mb, "ring buffer size per process in MiB")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  sub->add_option("--max-trace-events", args->max_trace_events,
                  "keep only the newest N trace entries (live state stays complete); 0 = all")
      ->capture_default_str();
  sub->add_option("--snapshot-every", args->snapshot_every,
                  "also write EXE.PID.periodic-N.json every SECONDS while a process runs")
      ->check(CLI::Range(0.001, 1e9));
  sub->add_flag("--no-follow", args->no_follow, "trace only CMD itself, not its children");
  sub->add_flag("-q,--quiet", args->quiet, "print nothing but errors");
  analysis::add_check_options(sub, args->check);
  sub->add_option("command", args->command, "the program to run and its arguments (after --)")
      ->required();
  sub->callback([args, &exit_code] { exit_code = run_main(*args); });
}

}  // namespace cumemtrace::cli
