#include "live/collector_loop.h"

#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "analysis/breakdown_format.h"
#include "control_protocol.h"
#include "live/control_channel.h"
#include "live/metrics_text.h"
#include "live/summary.h"
#include "snapshot/size_format.h"
#include "verdicts/process_summary.h"
#include "verdicts/report.h"

namespace cumemtrace::collect {

namespace {

std::vector<std::string> split_nul(const char* p, size_t n) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    if (p[i] == '\0') {
      out.emplace_back(p + start, i - start);
      start = i + 1;
    }
  }
  if (start < n) out.emplace_back(p + start, n - start);
  return out;
}

}  // namespace

Collector::Collector(int control_fd, CollectorOptions opts)
    : control_fd_(control_fd), opts_(std::move(opts)) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  hostname_ = host;
  opts_.session.driver_memory = &driver_memory_;
  if (opts_.max_disk_bytes) {
    budget_ = std::make_unique<DiskBudget>(opts_.max_disk_bytes);
    opts_.session.budget = budget_.get();
  }
}

Collector::~Collector() {
  if (control_fd_ >= 0) ::close(control_fd_);
  for (int c : connections_) ::close(c);
}

void Collector::set_direct_child(pid_t pid) {
  child_ = pid;
}

bool Collector::accept_connections() {
  bool any = false;
  while (rendezvous_fd_ >= 0) {
    const int fd = ::accept4(rendezvous_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      break;  // EAGAIN: none waiting
    }
    connections_.push_back(fd);
    any = true;
  }
  return any;
}

bool Collector::accept_hello(int fd) {
  alignas(8) char buf[wire::kMaxHelloBytes];
  Received got = recv_with_fds(fd, buf, sizeof buf);
  const ssize_t n = got.bytes;
  if (n <= 0) return false;
  on_hello(buf, n, got.fds);
  return true;
}

void Collector::on_hello(const char* buf, ssize_t n, std::vector<int>& fds) {
  auto reject = [&](const std::string& why) {
    if (fds.size() >= 2) send_ack(fds[1], 1, why);
    for (int fd : fds) ::close(fd);
    refusals_.push_back(why);
    spdlog::debug("refused a process: {}", why);
    if (opts_.summary) fmt::print(stderr, "cumemtrace: rejected a traced process: {}\n", why);
  };
  wire::Hello h{};
  if (static_cast<size_t>(n) < sizeof h || fds.size() != 2) return reject("malformed hello");
  memcpy(&h, buf, sizeof h);
  if (h.magic != wire::kHelloMagic) return reject("malformed hello");
  if (h.wire_version != wire::kWireVersion) {
    return reject(fmt::format("preload speaks wire version {}, this collector {}", h.wire_version,
                              wire::kWireVersion));
  }
  const uint64_t body = static_cast<uint64_t>(h.exe_bytes) + h.argv_bytes + h.rank_bytes;
  if (sizeof h + body > static_cast<uint64_t>(n)) return reject("malformed hello");
  ProcessInfo info;
  info.pid = h.pid;
  info.ppid = h.ppid;
  info.hostname = hostname_;
  const char* p = buf + sizeof h;
  info.exe.assign(p, h.exe_bytes);
  p += h.exe_bytes;
  info.argv = split_nul(p, h.argv_bytes);
  p += h.argv_bytes;
  for (const auto& kv : split_nul(p, h.rank_bytes)) {
    auto eq = kv.find('=');
    if (eq != std::string::npos) info.rank[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  if (!opts_.refuse.empty()) {  // the process prints the reason itself
    spdlog::debug("pid {}: tracing refused: {}", h.pid, opts_.refuse);
    send_ack(fds[1], 1, opts_.refuse);
    for (int fd : fds) ::close(fd);
    return;
  }
  for (auto& s : sessions_) {
    if (!s->open() && s->info().pid == h.pid) s->mark_exec();
  }
  const int memfd = fds[0];
  const int live = fds[1];
  try {
    sessions_.push_back(
        std::make_unique<ProcessSession>(memfd, live, std::move(info), opts_.session));
  } catch (const std::exception& e) {
    send_ack(live, 1, e.what());
    ::close(live);
    refusals_.push_back(fmt::format("cannot trace pid {}: {}", h.pid, e.what()));
    if (opts_.summary) fmt::print(stderr, "cumemtrace: cannot trace pid {}: {}\n", h.pid, e.what());
    return;
  }
  send_ack(live, 0, "");
  spdlog::debug("pid {} ({}): session opened, ring of {} bytes", h.pid,
                sessions_.back()->info().exe, sessions_.back()->ring_bytes());
}

// One of live/collector_signals.h's, blocked into the signal fd by `run`: said, then dropped.
// SIGUSR2 was most likely meant for a traced program (`cumemtrace snapshot PID` asks one).
void Collector::note_ignored_signal(const signalfd_siginfo& si) const {
  std::string traced;
  for (const auto& s : sessions_) {
    if (s->open()) traced += fmt::format("{}{}", traced.empty() ? "" : ", ", s->info().pid);
  }
  spdlog::warn("ignored signal {} ({}) from pid {}: pid {} is cumemtrace's collector{}",
               si.ssi_signo, strsignal(static_cast<int>(si.ssi_signo)), si.ssi_pid, getpid(),
               traced.empty() ? std::string()
                              : fmt::format("; the processes it traces: {} (cumemtrace snapshot "
                                            "PID asks one of them for a snapshot)",
                                            traced));
}

void Collector::handle_signals() {
  signalfd_siginfo si;
  while (read(signal_fd_, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
    if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGHUP) {
      if (child_ > 0 && !child_status_) kill(child_, static_cast<int>(si.ssi_signo));
    } else if (si.ssi_signo != SIGCHLD) {
      note_ignored_signal(si);
    }
  }
  if (child_ > 0 && !child_status_) {
    int status;
    pid_t r = waitpid(child_, &status, WNOHANG);
    if (r == child_) child_status_ = status;
  }
}

void Collector::finish(ProcessSession& s) {
  report_written(s);
  spdlog::debug("pid {}: session closed ({} events dropped)", s.info().pid, s.dropped());
  std::optional<snap::Ended> ended;
  if (s.info().pid == child_ && child_status_) {
    snap::Ended e;
    const int st = *child_status_;
    if (WIFSIGNALED(st)) {
      e.how = "signal";
      e.signal = WTERMSIG(st);
    } else {
      e.how = "exit";
      e.code = WEXITSTATUS(st);
    }
    // The process image that exec'd away is not the one that exited.
    if (s.observed_end().how == "exec") e = s.observed_end();
    ended = e;
  } else {
    ended = s.observed_end();
  }
  std::optional<snap::Snapshot> snapshot;
  try {
    snapshot = s.snapshot("exit", ended);
  } catch (const std::exception& e) {
    fmt::print(stderr, "cumemtrace: {}\n", e.what());
  }
  if (snapshot) {
    // One analysed view for the paragraph and the summary: each device replayed once.
    const analysis::AnalysedSnapshot view(*snapshot);
    std::string path;
    try {
      path = s.write(*snapshot);
      if (opts_.summary) {
        fmt::print(stderr, "cumemtrace: wrote {}\n{}", path, summarize(view));
      }
    } catch (const std::exception& e) {
      // A full disk: `run`'s limits still judge the snapshot, under a name that says why there
      // is no file, instead of a gate passing for want of one.
      fmt::print(stderr, "cumemtrace: {}\n", e.what());
    }
    // Its summary beside it (verdicts/process_summary.h): what `report DIR` reads of a process
    // instead of the whole file. A summary that cannot be written costs only that speed.
    analysis::ProcessSummary summary;
    try {
      summary = analysis::summarize_snapshot(view, path);
      if (!path.empty()) {
        analysis::write_summary_file(summary, path);
        // A bounded capture counts it against --max-disk, never dropped (live/disk_budget.h).
        if (budget_)
          budget_->add(analysis::summary_path_for(path), WindowKind::kSummary, s.info().pid);
      }
    } catch (const std::exception& e) {
      fmt::print(stderr, "cumemtrace: {}\n", e.what());
    }
    if (path.empty()) path = fmt::format("pid {} (snapshot not written)", s.info().pid);
    written_.push_back(WrittenSnapshot{path, std::move(*snapshot), std::move(summary)});
  }
  s.finish_bounded();
  if (!s.error().empty()) fmt::print(stderr, "cumemtrace: {}\n", s.error());
}

// Files written while processes run get their one line as they appear; under a disk cap only
// OOM files (a bounded capture may drop any other window later: its files are listed once at the
// end, report_bounded).
void Collector::report_written(ProcessSession& s) {
  for (const auto& f : s.take_new_files()) {
    // An OOM's line is said even under -q: the program is failing, and the line says why.
    if ((!opts_.summary || budget_) && f.oom_verdict.empty()) continue;
    if (f.oom_verdict.empty()) {
      fmt::print(stderr, "cumemtrace: wrote {}\n", f.path);
    } else {
      // The same "wrote" line, with the verdict of the OOM that asked for the file.
      fmt::print(stderr, "cumemtrace: wrote {}: out of memory on {}\n", f.path, f.oom_verdict);
    }
  }
}

// The end of a bounded capture: what is on disk and what was dropped, each said once (a window
// announced as it was written could be gone by the end).
void Collector::report_bounded() const {
  if (!budget_ || !opts_.summary) return;
  const DiskBudget& b = *budget_;
  fmt::print(stderr, "cumemtrace: --keep bounded left {} on disk ({} of the {} --max-disk cap):\n",
             analysis::plural(b.kept().size(), "file"), snap::format_bytes(b.total()),
             snap::format_bytes(b.cap()));
  for (const DiskFile& f : b.kept()) {
    fmt::print(stderr, "  {} ({}, {})\n", f.path, window_kind_name(f.kind),
               snap::format_bytes(f.bytes));
  }
  if (b.dropped().empty()) return;
  // One line per reason, in the order of the first drop for it.
  std::vector<std::pair<std::string, std::vector<std::string>>> by_why;
  for (const DiskFile& f : b.dropped()) {
    auto it = std::find_if(by_why.begin(), by_why.end(), [&](auto& w) { return w.first == f.why; });
    if (it == by_why.end()) it = by_why.insert(by_why.end(), {f.why, {}});
    it->second.push_back(f.path.substr(f.path.rfind('/') + 1));
  }
  for (const auto& [why, names] : by_why) {
    fmt::print(stderr, "cumemtrace: dropped {} ({}): {}\n",
               analysis::plural(names.size(), "window"), why, fmt::join(names, ", "));
  }
}

void Collector::sample_driver_memory(std::chrono::steady_clock::time_point now) {
  if (now < next_driver_sample_ ||
      std::none_of(sessions_.begin(), sessions_.end(), [](auto& s) { return s->open(); })) {
    return;
  }
  if (!driver_memory_.available()) return;
  next_driver_sample_ = now + std::chrono::seconds(1);
  auto all = driver_memory_.sample_all();
  for (auto& s : sessions_) {
    if (!s->open()) continue;
    auto it = all.find(s->info().pid);
    // A process NVML no longer lists and whose address space is gone is exiting: the driver
    // tears its contexts down before the collector sees the end, and a 0 then says nothing of
    // what the program held (the exit sample speaks for its end).
    if (it == all.end() && !s->maps_ring()) continue;
    s->add_driver_usage(it != all.end() ? it->second : std::vector<DriverUsage>{});
  }
}

// A scrape waits: a text of every process's current state, built by the analysis engine from the
// same snapshot a file would hold. Building stops the draining for as long as it takes (the
// rings hold the events meanwhile), so texts are built at most every max(100 ms, 9 x the cost):
// the loop spends at most a tenth of its time on scrapers however often they come.
void Collector::publish_metrics(std::chrono::steady_clock::time_point now) {
  if (!metrics_ || now < next_metrics_) return;
  const uint64_t generation = metrics_->pending();
  if (!generation) return;
  std::vector<snap::Snapshot> snapshots;
  for (auto& s : sessions_) {
    s->drain();  // what a process recorded before the scrape arrived is in its answer
    try {
      snapshots.push_back(s->snapshot("metrics", std::nullopt, /*symbolize=*/false));
    } catch (const std::exception& e) {
      spdlog::warn("metrics: pid {}: {}", s->info().pid, e.what());
    }
  }
  std::vector<const snap::Snapshot*> processes;
  for (const auto& s : snapshots) processes.push_back(&s);
  metrics_->publish(metrics_text(processes, MetricsFormat::kPrometheus),
                    metrics_text(processes, MetricsFormat::kOpenMetrics), generation);
  const auto end = std::chrono::steady_clock::now();
  next_metrics_ = end + std::max<std::chrono::steady_clock::duration>(
                            std::chrono::milliseconds(100), 9 * (end - now));
}

bool Collector::done() const {
  if (!sessions_.empty() || !connections_.empty()) return false;
  if (child_ > 0) return child_status_.has_value();
  return control_fd_ < 0;
}

void Collector::run() {
  std::vector<pollfd> pfds;
  int idle_rounds = 0;
  bool backlog = false;
  // A process may connect between the last poll and the end: take it before returning.
  while (!done() || accept_connections()) {
    pfds.clear();
    if (control_fd_ >= 0) pfds.push_back({control_fd_, POLLIN, 0});
    if (signal_fd_ >= 0) pfds.push_back({signal_fd_, POLLIN, 0});
    if (rendezvous_fd_ >= 0) pfds.push_back({rendezvous_fd_, POLLIN, 0});
    for (int c : connections_) pfds.push_back({c, POLLIN, 0});
    for (auto& s : sessions_) {
      if (s->live_fd() >= 0) pfds.push_back({s->live_fd(), POLLIN, 0});
    }
    // Poll fast while rings are busy, back off when they are quiet; not at all while a ring has
    // more than one batch waiting.
    const int timeout = backlog ? 0 : sessions_.empty() ? 100 : idle_rounds < 10 ? 1 : 5;
    int r = poll(pfds.data(), pfds.size(), timeout);
    if (r < 0 && errno != EINTR) {
      spdlog::error("poll failed: {}", strerror(errno));
      break;
    }
    size_t drained = 0;
    backlog = false;
    for (auto& s : sessions_) {
      const size_t n = s->drain();
      drained += n;
      backlog = backlog || n == ProcessSession::kDrainBatch;
      if (n < ProcessSession::kDrainBatch) s->bounded_tick();  // its ring was emptied
    }
    idle_rounds = drained ? 0 : idle_rounds + 1;
    const auto now = std::chrono::steady_clock::now();
    sample_driver_memory(now);
    for (auto& s : sessions_) {
      s->periodic(now);
      s->follow(now);
      report_written(*s);
    }
    publish_metrics(now);
    for (const auto& p : pfds) {
      if (!p.revents) continue;
      if (p.fd == control_fd_) {
        if (!accept_hello(control_fd_)) {  // EOF: no process can reach us that way any more
          ::close(control_fd_);
          control_fd_ = -1;
        }
      } else if (p.fd == rendezvous_fd_) {
        accept_connections();
      } else if (auto c = std::find(connections_.begin(), connections_.end(), p.fd);
                 c != connections_.end()) {
        accept_hello(p.fd);  // one Hello per connection; EOF: the process gave up or died
        ::close(p.fd);
        connections_.erase(c);
      } else if (p.fd == signal_fd_) {
        handle_signals();
      } else {
        for (auto& s : sessions_) {
          if (s->live_fd() >= 0 && s->live_fd() == p.fd) s->close_live();
        }
      }
    }
    if (signal_fd_ < 0 && child_ > 0 && !child_status_) handle_signals();
    // A closed session is final once we know how it ended: the direct child needs its status.
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      auto& s = **it;
      const bool waiting = s.info().pid == child_ && !child_status_;
      if (!s.open() && !waiting) {
        finish(s);
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  report_bounded();
}

}  // namespace cumemtrace::collect
