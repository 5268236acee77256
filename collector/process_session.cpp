#include "process_session.h"

#include <signal.h>
#include <unistd.h>

#include <sys/wait.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "snapshot_json_writer.h"

namespace cumemtrace::collect {

namespace {

std::string base_name(const std::string& path) {
  auto slash = path.rfind('/');
  std::string b = slash == std::string::npos ? path : path.substr(slash + 1);
  // File names carry the exe: keep them to safe characters.
  for (char& c : b) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  }
  return b.empty() ? "process" : b;
}

std::vector<std::string> read_cmdline(int pid) {
  std::ifstream f(fmt::format("/proc/{}/cmdline", pid), std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] == '\0') {
      out.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  }
  return out;
}

// How a process whose liveness socket just closed ended, from the system's point of view. The
// socket closes in the kernel's exit path shortly before the process becomes a zombie, or at
// exec when it lives on: wait briefly for the zombie, whose stat line still carries its wait
// status (field 52). A process reaped already is "vanished". One that is running with other
// arguments than the traced image had, or still running after the wait, has exec'd.
snap::Ended observe_from_proc(int pid, const std::vector<std::string>& argv) {
  snap::Ended e;
  for (int i = 0; i < 50; ++i) {
    std::ifstream stat(fmt::format("/proc/{}/stat", pid));
    std::string line;
    if (!std::getline(stat, line)) {
      e.how = "vanished";
      return e;
    }
    const auto close = line.rfind(')');
    if (close == std::string::npos || close + 2 >= line.size()) break;
    const char state = line[close + 2];
    if (state == 'Z' || state == 'X') {
      std::istringstream rest(line.substr(close + 2));
      std::string field;
      int status = -1;
      for (int f = 3; rest >> field; ++f) {
        if (f == 52) status = std::atoi(field.c_str());
      }
      if (status < 0) {
        e.how = "vanished";
      } else if (WIFSIGNALED(status)) {
        e.how = "signal";
        e.signal = WTERMSIG(status);
      } else {
        e.how = "exit";
        e.code = WEXITSTATUS(status);
      }
      return e;
    }
    if (const auto now = read_cmdline(pid); !now.empty() && now != argv) break;
    usleep(5000);
  }
  e.how = "exec";
  return e;
}

}  // namespace

ProcessSession::ProcessSession(int memfd, int live_fd, ProcessInfo info, SessionOptions opts)
    : ring_(std::make_unique<RingReader>(memfd)),
      live_fd_(live_fd),
      info_(std::move(info)),
      opts_(std::move(opts)),
      model_(ring_->header().start_realtime_ns, ring_->header().start_monotonic_ns,
             opts_.max_trace_events) {
  ring_->mark_collector(getpid(), wire::kCollectorAttached);
}

ProcessSession::~ProcessSession() {
  if (live_fd_ >= 0) ::close(live_fd_);
  if (ring_) ring_->mark_collector(0, wire::kCollectorGone);
}

size_t ProcessSession::drain() {
  if (!ring_ || !error_.empty()) return 0;
  size_t n = 0;
  try {
    n = ring_->drain([this](const Record& r) {
      model_.add(r);
      // Written before this record's slot is released: the thread that hit the OOM waits for
      // that, so the file shows the state at the failure, before the application reacts.
      if (model_.take_oom_request()) {
        try {
          oom_files_.push_back(write(snapshot("oom", std::nullopt)));
        } catch (const std::exception& e) {
          error_ = e.what();
        }
      }
    });
  } catch (const CorruptRing& e) {
    error_ = fmt::format("corrupt ring from pid {}: {}", info_.pid, e.what());
  }
  return n;
}

void ProcessSession::close_live() {
  drain();
  // exit() was seen in the ring: that is the answer, and it may be a while before the process
  // (with its atexit work and address space teardown) is a zombie.
  proc_end_ = model_.exited() ? snap::Ended{"exit", model_.exit_status(), 0}
                              : observe_from_proc(info_.pid, info_.argv);
  drain();
  if (live_fd_ >= 0) ::close(live_fd_);
  live_fd_ = -1;
}

snap::Ended ProcessSession::observed_end() const {
  return proc_end_;
}

void ProcessSession::mark_exec() {
  proc_end_ = snap::Ended{"exec", 0, 0};
}

snap::Snapshot ProcessSession::snapshot(const std::string& reason,
                                        const std::optional<snap::Ended>& ended) {
  snap::Snapshot s = model_.build(info_, symbolizer_);
  s.tool->reason = reason;
  s.tool->events_dropped = ring_->dropped();
  if (ended) s.tool->ended = *ended;
  return s;
}

std::string ProcessSession::write(const snap::Snapshot& s) {
  const std::string& reason = s.tool->reason;
  const std::string suffix = reason == "exit" ? "" : "." + reason;
  return snap::write_snapshot_file(
      s, fmt::format("{}/{}.{}{}.json", opts_.output_dir, base_name(info_.exe), info_.pid, suffix));
}

}  // namespace cumemtrace::collect
