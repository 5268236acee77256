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
//    -q prints nothing but errors (a passing verdict is silent).
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
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "analysis/check.h"
#include "cli/check_options.h"
#include "cli/cli_checks.h"
#include "cli/commands.h"
#include "cli/log.h"
#include "io/file_output.h"
#include "live/collector_loop.h"
#include "live/output_dir.h"

namespace cumemtrace::cli {

namespace {

struct RunArgs {
  std::string output = ".";
  unsigned stack_depth = 32;
  unsigned buffer_mb = 8;
  uint64_t max_trace_events = 0;
  double snapshot_every = 0;
  bool no_follow = false;
  bool free_stacks = false;
  bool torch_native_stacks = false;
  std::string clock;  // empty: the preload's own default (precise) or CUMEMTRACE_CLOCK
  bool quiet = false;
  bool allow_no_cuda = false;
  int error_exitcode = 1;
  std::string verdict_file;
  std::string log_level;
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

std::string limit_names(const analysis::CheckOptions& c) {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += (s.empty() ? "" : ", ") + std::string(name);
  };
  add(c.max_leaked_bytes.has_value(), "--max-leaked-bytes");
  add(c.max_peak_bytes.has_value(), "--max-peak-bytes");
  add(c.max_growth.has_value(), "--max-growth");
  return s;
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
    if (a.free_stacks) setenv("CUMEMTRACE_FREE_STACKS", "1", 1);
    if (a.torch_native_stacks) setenv("CUMEMTRACE_TORCH_NATIVE_STACKS", "1", 1);
    if (!a.clock.empty()) setenv("CUMEMTRACE_CLOCK", a.clock.c_str(), 1);
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
  const bool gate = has_limits(a.check);
  // Everything the user got wrong is said now, not after an hours-long job.
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
        "--verdict-file and --junit need a limit (--max-leaked-bytes, --max-peak-bytes or "
        "--max-growth)";
  }
  if (!usage.empty()) {
    fmt::print(stderr, "cumemtrace run: {}\n", usage);
    return 2;
  }

  std::string preload = find_preload();
  std::string problem = preload_problem(preload);
  if (problem.empty()) problem = collect::prepare_output_dir(a.output);
  // After the directory exists: a relative CUMEMTRACE_LOG_FILE is created inside it.
  if (auto bad = log::init(a.log_level, a.output); !bad.empty()) {
    fmt::print(stderr, "cumemtrace run: {}\n", bad);
    return 2;
  }
  int ctl[2] = {-1, -1};
  if (problem.empty() && socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ctl) != 0) {
    problem = fmt::format("socketpair failed: {}", strerror(errno));
  }
  if (!problem.empty()) {
    if (gate) {
      fmt::print(stderr, "cumemtrace: {}; not running the program: {} needs a trace\n", problem,
                 limit_names(a.check));
      return 2;
    }
    fmt::print(stderr, "cumemtrace: {}; running the program untraced\n", problem);
    preload.clear();
  }
  std::error_code ec;
  const std::string out_dir = std::filesystem::absolute(a.output, ec).lexically_normal().string();
  if (!preload.empty() && !a.quiet) {
    fmt::print(stderr, "cumemtrace: writing snapshots to {}\n", out_dir);
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
  const auto& written = collector.written();

  // What was traced, in one line either way.
  std::string untraced;
  if (!preload.empty() && written.empty()) {
    untraced = collector.refusals().empty()
                   ? std::string("no CUDA allocation seen; no snapshot written")
                   : fmt::format("tracing was refused ({}); no snapshot written",
                                 collector.refusals().front());
  }
  if (!untraced.empty() && (!a.quiet || gate)) fmt::print(stderr, "cumemtrace: {}\n", untraced);
  if (!written.empty() && !a.quiet && ::access(written.front().path.c_str(), F_OK) == 0) {
    fmt::print(stderr, "cumemtrace: see where the memory went: cumemtrace report {}\n",
               written.front().path);
  }
  if (!gate) return code;

  // The gate. The program's own failure comes first: its status is never masked.
  auto gate_failed = [&] { return code != 0 ? code : a.error_exitcode; };
  if (preload.empty() || written.empty()) {
    if (a.allow_no_cuda && !preload.empty() && collector.refusals().empty()) {
      if (!a.quiet) fmt::print(stderr, "cumemtrace: nothing to check (--allow-no-cuda)\n");
      return code;
    }
    fmt::print(stderr, "cumemtrace: {} cannot judge a program that left no snapshot: failed{}\n",
               limit_names(a.check),
               collector.refusals().empty() ? " (pass --allow-no-cuda if that is expected)" : "");
    return gate_failed();
  }
  // The same gate as `cumemtrace check`, on the snapshots just written.
  std::vector<analysis::LoadedSnapshot> snaps;
  for (const auto& w : written) snaps.push_back({w.path, w.snapshot});
  const bool to_stdout = a.check.format != "text";
  std::ostringstream verdict_text;
  const int verdict = analysis::run_check(snaps, a.check, verdict_text, std::cerr);
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
  return status;
}

}  // namespace

void add_run_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* sub = app.add_subcommand(
      "run",
      "run PROGRAM with cumemtrace and write one snapshot per traced process: "
      "cumemtrace run [OPTIONS] PROGRAM [ARGS...] (options end at PROGRAM; -- also works)");
  sub->add_option("-o,--output", args->output, "directory for snapshots (created if missing)")
      ->capture_default_str();
  sub->add_option("--stack-depth", args->stack_depth, "native frames per event, 0 disables")
      ->check(between(0, 128))
      ->capture_default_str();
  sub->add_flag("--free-stacks", args->free_stacks,
                "record a stack for every release too (frees, unmaps, PyTorch's free requests); "
                "by default only allocations carry one");
  sub->add_option("--clock", args->clock,
                  "each event's time: precise (the default: the TSC, ns) or coarse (the kernel's "
                  "tick, 1-4 ms; a cheaper read for allocation-bound programs)")
      ->check(CLI::IsMember({"precise", "coarse"}));
  sub->add_flag("--torch-native-stacks", args->torch_native_stacks,
                "give PyTorch's block events (and its cudaMallocAsync tensors) all their native "
                "frames too where they have Python ones or an autograd node's; by default such a "
                "stack is the Python frames (PyTorch's stacks=\"python\"), on autograd's engine "
                "thread the node's apply()");
  sub->add_option("--buffer-mb", args->buffer_mb, "ring buffer size per process in MiB")
      ->check(between(1, 4096))
      ->capture_default_str();
  sub->add_option("--max-trace-events", args->max_trace_events,
                  "keep only the newest N trace entries (live state stays complete); 0 = all")
      ->check(between(0, INT64_MAX))
      ->capture_default_str();
  sub->add_option("--snapshot-every", args->snapshot_every,
                  "also write EXE.PID.periodic-N.json every SECONDS while a process runs")
      ->check(seconds_between(0.001, 1e9));
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
  sub->add_flag("--allow-no-cuda", args->allow_no_cuda,
                "let limits pass when the program made no CUDA allocation (default: fail)");
  sub->add_option("--log-level", args->log_level,
                  "the collector's own diagnostics: trace, debug, info, warn, error or off "
                  "(default: CUMEMTRACE_LOG, else warn)")
      ->check(log_level_name());
  sub->add_option("command", args->command, "PROGRAM and its arguments")->required();
  sub->callback([args, &exit_code] { exit_code = run_main(*args); });
}

}  // namespace cumemtrace::cli
