// Contract: one traced process image as the collector sees it: its ring, its liveness socket, its
// TraceModel. The owner drains it regularly, and when the liveness socket reports EOF (the
// process exited, was killed, or exec'd) calls finish(), which drains what is left and writes
// the final snapshot. A corrupt ring ends the session with an error message, never a crash.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "ring_reader.h"
#include "snapshot.h"
#include "symbolizer.h"
#include "trace_model.h"

namespace cumemtrace::collect {

struct SessionOptions {
  std::string output_dir = ".";
  uint64_t max_trace_events = 0;  // 0 = keep every trace entry
};

class ProcessSession {
 public:
  // Takes ownership of both descriptors. Throws CorruptRing if the ring is not usable.
  ProcessSession(int memfd, int live_fd, ProcessInfo info, SessionOptions opts);
  ~ProcessSession();

  int live_fd() const { return live_fd_; }
  const ProcessInfo& info() const { return info_; }
  bool open() const { return live_fd_ >= 0; }
  const std::string& error() const { return error_; }

  // Reads published records; returns how many. Writes an OOM snapshot when one was recorded.
  size_t drain();
  // The process is gone: read the rest and close the liveness socket.
  void close_live();
  // Builds the snapshot of the current state. `ended` describes how the process ended, if known.
  snap::Snapshot snapshot(const std::string& reason, const std::optional<snap::Ended>& ended);
  // Writes a snapshot file named <exe>.<pid>[.<reason>].json in the output directory (never
  // overwriting); returns its path. Throws std::runtime_error on I/O failure.
  std::string write(const snap::Snapshot& s);

  // How the process ended as far as the ring and the system tell (exit() seen, exec, vanished).
  snap::Ended observed_end() const;
  // A new image of the same pid said hello: this one was replaced by exec.
  void mark_exec();
  const std::vector<std::string>& oom_files() const { return oom_files_; }

 private:
  std::unique_ptr<RingReader> ring_;
  int live_fd_;
  ProcessInfo info_;
  SessionOptions opts_;
  TraceModel model_;
  Symbolizer symbolizer_;
  std::string error_;
  std::vector<std::string> oom_files_;
  snap::Ended proc_end_{"running", 0, 0};
};

}  // namespace cumemtrace::collect
