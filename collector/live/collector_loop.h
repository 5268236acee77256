// Contract: the collector's event loop. It accepts traced processes on a control socket
// (preload/wire/control_protocol.h) and, under `cumemtrace run`, on connections to its rendezvous
// socket (live/rendezvous.h: processes that lost the inherited one), drains their rings every
// millisecond or so while they run, and writes one snapshot per process image when it ends, even
// when it was killed. It returns when every traced process is gone (a process that said hello is
// waited for until its liveness socket closes, even after the direct child exited), no
// connection is waiting, and either the direct child was reaped (`cumemtrace run`) or the control
// socket closed (a collector started by the preload). Ring contents are untrusted input.
// About once a second it samples driver-visible memory (NVML, when present) for every open
// process, and it writes the periodic snapshots that SessionOptions::snapshot_every_s asks for.
#pragma once

#include <sys/signalfd.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "live/driver_memory.h"
#include "live/metrics_server.h"
#include "live/process_session.h"
#include "snapshot/snapshot.h"
#include "verdicts/process_summary.h"

namespace cumemtrace::collect {

struct WrittenSnapshot {
  std::string path;
  snap::Snapshot snapshot;
  // Its summary (verdicts/process_summary.h), also written beside the file; the file's name, size
  // and mtime are empty when the snapshot could not be written.
  analysis::ProcessSummary summary;
};

struct CollectorOptions {
  SessionOptions session;
  bool summary = true;  // print "wrote ..." and the summary paragraph on stderr
  std::string refuse;   // when set, every process is told this and runs untraced
  // Bounded capture (live/disk_budget.h): the cap on bytes on disk; 0 = off (keep everything).
  uint64_t max_disk_bytes = 0;
};

class Collector {
 public:
  Collector(int control_fd, CollectorOptions opts);
  ~Collector();

  // `cumemtrace run`: the launcher's child; its exit status decides how its snapshot ends.
  void set_direct_child(pid_t pid);
  // Signals the loop handles (blocked by the caller before forking): SIGCHLD, SIGTERM, SIGHUP;
  // any other (live/collector_signals.h's) is said in a warning and ignored.
  void set_signal_fd(int fd) { signal_fd_ = fd; }
  // `cumemtrace run`'s listening rendezvous socket (not owned; non-blocking).
  void set_rendezvous_fd(int fd) { rendezvous_fd_ = fd; }
  // `--metrics`: the server whose scrapes the loop answers with texts of its live model (not
  // owned; live/metrics_server.h, live/metrics_text.h).
  void set_metrics(MetricsServer* m) { metrics_ = m; }

  void run();

  // Every final snapshot; one that could not be written (full disk) is kept too, its path
  // "pid N (snapshot not written)".
  const std::vector<WrittenSnapshot>& written() const { return written_; }
  // Why processes that asked to be traced were not (one line each): a wrong wire version, a ring
  // that could not be mapped... `run` fails a gate that would otherwise judge nothing.
  const std::vector<std::string>& refusals() const { return refusals_; }
  // The direct child's wait status, once reaped.
  std::optional<int> child_status() const { return child_status_; }

 private:
  // Reads one Hello from `fd` and opens its session (or refuses it); false at EOF.
  bool accept_hello(int fd);
  // Takes every connection waiting on the rendezvous socket; true when there was one.
  bool accept_connections();
  void on_hello(const char* buf, ssize_t n, std::vector<int>& fds);
  void handle_signals();
  void note_ignored_signal(const signalfd_siginfo& si) const;
  void finish(ProcessSession& s);
  void report_written(ProcessSession& s);
  void report_bounded() const;
  void sample_driver_memory(std::chrono::steady_clock::time_point now);
  bool done() const;
  void publish_metrics(std::chrono::steady_clock::time_point now);

  int control_fd_;
  int signal_fd_ = -1;
  int rendezvous_fd_ = -1;
  std::vector<int> connections_;  // accepted on the rendezvous socket, their Hello not yet read
  CollectorOptions opts_;
  pid_t child_ = -1;
  std::optional<int> child_status_;
  std::vector<std::unique_ptr<ProcessSession>> sessions_;  // open or awaiting the child's status
  std::vector<WrittenSnapshot> written_;
  std::vector<std::string> refusals_;
  std::string hostname_;
  DriverMemory driver_memory_;
  std::unique_ptr<DiskBudget> budget_;  // bounded capture only
  std::chrono::steady_clock::time_point next_driver_sample_{};
  MetricsServer* metrics_ = nullptr;
  std::chrono::steady_clock::time_point next_metrics_{};
};

}  // namespace cumemtrace::collect
