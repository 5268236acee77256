// Contract: one traced process image as the collector sees it: its ring, its liveness socket, its
// TraceModel. The owner drains it regularly, and when the liveness socket reports EOF (the
// process exited, was killed, or exec'd) calls close_live(), then writes the final snapshot. A
// process that closed the socket itself (it closes every descriptor) still maps its ring: it is
// then followed through /proc until the ring leaves its address space (exit or exec). A corrupt
// ring ends the session with an error message, never a crash. Driver-visible memory is sampled when
// the process names a device (with its PCI address, which maps NVML's numbering to the process's
// CUDA ordinals), when a context is created (which measures the context: TraceModel) or
// destroyed, at exit() and OOM, and by the owner. Snapshots of a running process are written
// on the way (EXE.rankN.PID... for a rank of a job): at an OOM (EXE.PID.oom.json, with that OOM's
// verdict, pytorch/oom_verdict.h, for the collector's line), at a cumemtrace_snapshot(tag) record
// (EXE.PID.TAG.json), when the process's SIGUSR2 counter in the ring header changed
// (EXE.PID.request-N.json; several signals between two drains make one file) and every
// `snapshot_every_s` seconds (EXE.PID.periodic-N.json). A driver sample is kept only when a
// device's value changed, or when a snapshot is written, so days of sampling stay small.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "live/disk_budget.h"
#include "live/driver_memory.h"
#include "live/interval_log.h"
#include "live/ring_reader.h"
#include "live/symbolizer.h"
#include "live/trace_model.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

struct SessionOptions {
  std::string output_dir = ".";
  uint64_t max_trace_events = 0;          // 0 = keep every trace entry
  double snapshot_every_s = 0;            // 0 = no periodic snapshots
  DriverMemory* driver_memory = nullptr;  // not owned; null = no driver-visible memory
  // Bounded capture (docs/report.md): the collector's cap on disk (not owned); null = off.
  DiskBudget* budget = nullptr;
  double interval_s = 10;  // interval summaries: seconds (whole iterations where marked)
};

class ProcessSession {
 public:
  // Takes ownership of both descriptors. Throws CorruptRing if the ring is not usable.
  ProcessSession(int memfd, int live_fd, ProcessInfo info, SessionOptions opts);
  ~ProcessSession();

  // Records read by one drain(): one busy process must not keep the collector from the others
  // (a child waits for its handshake).
  static constexpr size_t kDrainBatch = 16384;

  // The liveness socket to poll; -1 when there is none (closed, or followed through /proc).
  int live_fd() const { return live_fd_; }
  const ProcessInfo& info() const { return info_; }
  bool open() const { return live_fd_ >= 0 || followed_; }
  // Why reading this process's ring stopped early (a corrupt record); empty while reading goes
  // on. The snapshot carries it as `ring_error`.
  const std::string& error() const { return error_; }

  // Reads published records, at most kDrainBatch; returns how many. Writes the OOM, tagged and
  // requested snapshots that the records and the request counter ask for (in extra_files()).
  size_t drain();
  // A process followed through /proc: ends the session (close_live) once its ring is unmapped.
  void follow(std::chrono::steady_clock::time_point now);
  // Writes a periodic snapshot when one is due at `now`.
  void periodic(std::chrono::steady_clock::time_point now);
  // Whether the process's address space still holds this ring: false once it exits or execs.
  bool maps_ring() const;
  // Driver-visible memory of this process just sampled by the owner.
  // `force` keeps a sample even when unchanged (the figure at a snapshot); `at_exit` does not
  // read a missing device as 0 (the process may be tearing down its context right now).
  void add_driver_usage(const std::vector<DriverUsage>& usage, bool force = false,
                        bool at_exit = false);
  // The liveness socket reported EOF: read the rest and end the session, or, while the process
  // still maps the ring, follow it through /proc.
  void close_live();
  // Builds the snapshot of the current state. `ended` describes how the process ended, if known.
  // `symbolize` false leaves native frames unresolved (TraceModel::build), for the live gauges.
  snap::Snapshot snapshot(const std::string& reason, const std::optional<snap::Ended>& ended,
                          bool symbolize = true);
  // Writes a snapshot file named <exe>.[rank<N>.]<pid>[.<tag or reason>].json in the output
  // directory (rank<N> when analysis::rank_identity knows the process's rank; never overwriting;
  // no suffix for "exit"); returns its path. Throws std::runtime_error on I/O
  // failure.
  std::string write(const snap::Snapshot& s);

  // How the process ended as far as the ring and the system tell (exit() seen, exec, vanished).
  // For the debug log: the ring's size and the events its producers dropped.
  size_t ring_bytes() const;
  uint64_t dropped() const;
  snap::Ended observed_end() const;
  // A new image of the same pid said hello: this one was replaced by exec.
  void mark_exec();
  const std::vector<std::string>& oom_files() const { return oom_files_; }
  // Snapshots written while the process ran (OOM, tagged, requested, periodic), in order.
  const std::vector<std::string>& extra_files() const { return extra_files_; }
  // Those written since the last call; an OOM snapshot's with the verdict of the OOM that asked
  // for it (pytorch/oom_verdict.h: oom_verdict_line), for the collector's one line.
  struct NewFile {
    std::string path;
    std::string oom_verdict;  // "device 0: exhaustion: 1 MiB requested, ..."; empty: no OOM
  };
  std::vector<NewFile> take_new_files();
  // Bounded capture, with every record written so far drained: closes the intervals whose time
  // has passed in a program that records nothing (interval_log.h tick).
  void bounded_tick();
  // Bounded capture: closes the last interval and writes the summary (after the final snapshot).
  void finish_bounded();

 private:
  std::unique_ptr<RingReader> ring_;
  int live_fd_;
  ProcessInfo info_;
  SessionOptions opts_;
  TraceModel model_;
  Symbolizer symbolizer_;
  std::string error_;
  uint64_t time_resolution_ns_ = 0;  // the ring's clock: the coarse clock's tick, else 0
  std::vector<std::string> oom_files_;
  std::map<std::string, std::string> oom_verdicts_;  // OOM file -> its verdict line
  std::vector<std::string> extra_files_;
  size_t files_taken_ = 0;
  uint32_t requests_seen_ = 0;
  unsigned requests_written_ = 0;
  unsigned periodic_written_ = 0;
  std::chrono::steady_clock::time_point next_periodic_;
  std::vector<snap::DriverMemorySample> driver_samples_;
  std::map<int, uint64_t> driver_last_;  // device -> latest used bytes

  bool followed_ = false;
  std::chrono::steady_clock::time_point next_follow_check_;

  void on_record(const Record& r);
  // Bounded capture (see the contract of live/disk_budget.h and live/interval_log.h): a peak
  // window is written before a record that can only lower device memory, at a peak at least
  // 1/16 above the last peak window, which it replaces; a growth window once per streak of
  // sustained growth; the summary at each interval's close.
  void bounded_before(const Record& r);
  void bounded_after();
  void interval_closed();  // a growth window when a streak starts; the summary now and then
  void write_summary();
  std::string summary_path() const;
  std::unique_ptr<IntervalLog> intervals_;
  uint64_t peak_written_ = 0;
  std::string peak_file_;
  unsigned peaks_written_ = 0;
  unsigned growth_written_ = 0;
  std::chrono::steady_clock::time_point next_summary_{};
  void drain_all();
  void write_running(const std::string& reason, const std::string& tag);
  void sample_driver(bool at_exit = false);
  // A context just created on `device`: the driver's figure for it right now.
  void measure_context(int device);
  // NVML's per-device figures by the process's CUDA ordinals (see add_driver_usage).
  std::map<int, uint64_t> by_ordinal(const std::vector<DriverUsage>& usage) const;
  int64_t now_us() const;
  snap::Ended proc_end_{"running", 0, 0};
};

}  // namespace cumemtrace::collect
