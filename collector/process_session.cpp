#include "process_session.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

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

// A zombie still answers kill(pid, 0): read its state to tell "still running (exec'd)" from
// "dead, not yet reaped".
bool process_running(int pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return false;
  auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z' &&
         line[close + 2] != 'X';
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
    n = ring_->drain([this](const Record& r) { model_.add(r); });
  } catch (const CorruptRing& e) {
    error_ = fmt::format("corrupt ring from pid {}: {}", info_.pid, e.what());
  }
  if (model_.take_oom_request()) {
    // Written at once, while the application is still handling the error.
    try {
      oom_files_.push_back(write(snapshot("oom", std::nullopt)));
    } catch (const std::exception& e) {
      error_ = e.what();
    }
  }
  return n;
}

void ProcessSession::close_live() {
  alive_at_eof_ = process_running(info_.pid);
  drain();
  if (live_fd_ >= 0) ::close(live_fd_);
  live_fd_ = -1;
}

snap::Ended ProcessSession::observed_end() const {
  snap::Ended e;
  if (model_.exited()) {
    e.how = "exit";
    e.code = model_.exit_status();
  } else if (alive_at_eof_) {
    e.how = "exec";
  } else {
    e.how = "vanished";
  }
  return e;
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
