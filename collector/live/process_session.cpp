#include "live/process_session.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <sys/wait.h>
#include <time.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "analysis/frames.h"
#include "analysis/rank_identity.h"
#include "pytorch/categories.h"
#include "pytorch/oom_verdict.h"
#include "pytorch/whatif.h"
#include "snapshot/snapshot_json_writer.h"

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

// A tag becomes part of a file name: safe characters only, no leading dot, bounded length.
std::string file_tag(const std::string& tag) {
  std::string t = tag.substr(0, 100);
  for (char& c : t) {
    if (!(isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  }
  if (t.empty()) return "snapshot";
  if (t[0] == '.' || t[0] == '-') t[0] = '_';
  return t;
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

// A snapshot that cannot be written (a full disk) is reported, and reading goes on: the final
// snapshot may still find room, and the ring must keep draining so the program never waits.
void report_write_failure(const std::exception& e) {
  fmt::print(stderr, "cumemtrace: {}\n", e.what());
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
  if (ring_->header().time_source == wire::kTimeMonotonicCoarse) {
    timespec res{};
    clock_getres(CLOCK_MONOTONIC_COARSE, &res);  // the program's kernel: this machine's
    time_resolution_ns_ =
        static_cast<uint64_t>(res.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(res.tv_nsec);
  }
  requests_seen_ = ring_->header().snapshot_requests.load(std::memory_order_acquire);
  if (opts_.budget) {
    intervals_ = std::make_unique<IntervalLog>(opts_.interval_s);
    model_.count_stack_bytes();
  }
  if (opts_.snapshot_every_s > 0) {
    next_periodic_ = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(opts_.snapshot_every_s));
  }
}

ProcessSession::~ProcessSession() {
  if (live_fd_ >= 0) ::close(live_fd_);
  if (ring_) ring_->mark_collector(0, wire::kCollectorGone);
}

void ProcessSession::on_record(const Record& r) {
  if (intervals_) bounded_before(r);
  model_.add(r);
  if (intervals_) bounded_after();
  // Written before this record's slot is released: the thread that hit the OOM (or asked
  // for the snapshot) waits for that, so the file shows the state at that moment, before
  // the application goes on.
  try {
    if (model_.take_oom_request()) {
      sample_driver();
      const snap::Snapshot s = snapshot("oom", std::nullopt);
      oom_files_.push_back(write(s));
      extra_files_.push_back(oom_files_.back());
      // The newest OOM is the one this record reported.
      const analysis::SiteTable sites(s);
      const auto verdicts = analysis::oom_verdicts(s, sites);
      if (!verdicts.empty()) {
        oom_verdicts_[oom_files_.back()] = fmt::format("device {}: {}", verdicts.back().device,
                                                       analysis::oom_verdict_line(verdicts.back()));
      }
    }
    if (auto tag = model_.take_snapshot_request()) write_running("request", file_tag(*tag));
    if (r.ev.kind == wire::Kind::kExit) sample_driver(true);  // the last look at the context
    // A device just named: its driver figure can now be attributed to it.
    if (r.ev.kind == wire::Kind::kDevice) sample_driver();
    // The thread that created a context waits until this is done: nothing allocated since.
    if (auto device = model_.take_new_context()) measure_context(*device);
    // A context gone: the driver's figure drops now (a device left reads 0 from here on).
    if (r.ev.kind == wire::Kind::kContextDestroyed) sample_driver();
  } catch (const std::exception& e) {
    report_write_failure(e);
  }
}

size_t ProcessSession::drain() {
  if (!ring_ || !error_.empty()) return 0;
  size_t n = 0;
  try {
    n = ring_->drain([this](const Record& r) { on_record(r); }, kDrainBatch);
  } catch (const CorruptRing& e) {
    error_ = fmt::format("corrupt ring from pid {}: {}", info_.pid, e.what());
  } catch (const std::exception& e) {
    error_ = fmt::format("cannot process a record from pid {}: {}", info_.pid, e.what());
  }
  // Nothing more is read from this ring: its producers count their records as dropped at once
  // instead of waiting for space that will never come.
  if (!error_.empty()) ring_->mark_collector(0, wire::kCollectorGone);
  // A SIGUSR2 since the last look: the state now, after what the process recorded before it.
  const uint32_t requests = ring_->header().snapshot_requests.load(std::memory_order_acquire);
  if (requests != requests_seen_ && error_.empty()) {
    requests_seen_ = requests;
    try {
      write_running("request", fmt::format("request-{}", ++requests_written_));
    } catch (const std::exception& e) {
      report_write_failure(e);
    }
  }
  return n;
}

void ProcessSession::bounded_before(const Record& r) {
  using wire::Kind;
  const Kind k = r.ev.kind;
  if (k != Kind::kFree && k != Kind::kRelease && k != Kind::kUnmap && k != Kind::kExit &&
      k != Kind::kMark && k != Kind::kSnapshot && k != Kind::kOom) {
    return;
  }
  const uint64_t peak = model_.at_peak_bytes();
  if (!peak || peak <= peak_written_ + peak_written_ / 16) return;
  try {
    write_running("peak", fmt::format("peak-{}", ++peaks_written_));
    peak_written_ = peak;
    if (!peak_file_.empty()) opts_.budget->drop(peak_file_, "replaced by a higher peak");
    peak_file_ = extra_files_.back();
  } catch (const std::exception& e) {
    report_write_failure(e);
  }
}

void ProcessSession::bounded_after() {
  if (intervals_->after_record(model_, symbolizer_, model_.last_time_us(), driver_last_))
    interval_closed();
}

void ProcessSession::bounded_tick() {
  if (!intervals_ || !open() || !error_.empty()) return;
  if (intervals_->tick(model_, symbolizer_, now_us(), driver_last_)) interval_closed();
}

void ProcessSession::interval_closed() {
  try {
    if (intervals_->take_growth_start()) {
      write_running("growth", fmt::format("growth-{}", ++growth_written_));
    }
    // Rewritten whole, so not at every close (one per iteration would be quadratic): a collector
    // killed loses at most the last few seconds of summaries.
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_summary_) {
      next_summary_ = now + std::chrono::seconds(5);
      write_summary();
    }
  } catch (const std::exception& e) {
    report_write_failure(e);
  }
}

void ProcessSession::finish_bounded() {
  if (!intervals_) return;
  intervals_->finish(model_, symbolizer_, driver_last_);
  try {
    write_summary();
  } catch (const std::exception& e) {
    report_write_failure(e);
  }
  if (opts_.budget->over_cap()) {
    fmt::print(stderr,
               "cumemtrace: pid {}: the final snapshots and summaries alone exceed --max-disk ({} "
               "bytes on disk)\n",
               info_.pid, opts_.budget->total());
  }
}

std::string ProcessSession::summary_path() const {
  return fmt::format("{}/{}.{}.intervals.json", opts_.output_dir, base_name(info_.exe), info_.pid);
}

// The whole summary, rewritten (a new file renamed over the old one: never a half-written one,
// and a symlink in its place is replaced, not followed).
void ProcessSession::write_summary() {
  const DiskBudget& b = *opts_.budget;
  const std::string path = summary_path();
  auto files = [&](const std::vector<DiskFile>& list) {
    nlohmann::json out = nlohmann::json::array();
    for (const DiskFile& f : list) {
      if (f.pid != info_.pid || f.kind == WindowKind::kSummary) continue;
      nlohmann::json j = {{"file", f.path.substr(f.path.rfind('/') + 1)},
                          {"kind", window_kind_name(f.kind)},
                          {"bytes", f.bytes}};
      if (!f.why.empty()) j["why"] = f.why;
      out.push_back(std::move(j));
    }
    return out;
  };
  nlohmann::json totals = nlohmann::json::array();
  const auto dev = model_.device_totals();
  for (size_t d = 0; d < dev.size(); ++d) {
    totals.push_back({{"device", d},
                      {"allocations", dev[d].allocations},
                      {"frees", dev[d].frees},
                      {"bytes_allocated", dev[d].bytes_allocated},
                      {"bytes_freed", dev[d].bytes_freed},
                      {"live_bytes", dev[d].live},
                      {"peak_bytes", dev[d].peak}});
  }
  const nlohmann::json doc = {{"cumemtrace_intervals", 1},
                              {"pid", info_.pid},
                              {"exe", info_.exe},
                              {"interval_s", opts_.interval_s},
                              {"by", intervals_->by_iteration() ? "iteration" : "time"},
                              {"events", model_.events_total()},
                              {"max_disk_bytes", b.cap()},
                              {"totals", std::move(totals)},
                              {"intervals", intervals_->to_json()},
                              {"windows", files(b.kept())},
                              {"dropped", files(b.dropped())}};
  const std::string tmp = fmt::format("{}.{}.tmp", path, getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error(fmt::format("cannot write {}: {}", tmp, strerror(errno)));
  const std::string text = doc.dump(1) + "\n";
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  if (::close(fd) != 0 || !ok || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(fmt::format("cannot write {}: {}", path, strerror(err)));
  }
  opts_.budget->add(path, WindowKind::kSummary, info_.pid);
}

std::vector<ProcessSession::NewFile> ProcessSession::take_new_files() {
  std::vector<NewFile> out;
  for (size_t i = files_taken_; i < extra_files_.size(); ++i) {
    const auto v = oom_verdicts_.find(extra_files_[i]);
    out.push_back({extra_files_[i], v != oom_verdicts_.end() ? v->second : std::string()});
  }
  files_taken_ = extra_files_.size();
  return out;
}

void ProcessSession::periodic(std::chrono::steady_clock::time_point now) {
  if (opts_.snapshot_every_s <= 0 || !open() || now < next_periodic_ || !error_.empty()) return;
  const auto every = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(opts_.snapshot_every_s));
  // A slow write must not make files pile up: the next one is due a full period from now.
  while (next_periodic_ <= now) next_periodic_ += every;
  try {
    write_running("periodic", fmt::format("periodic-{}", ++periodic_written_));
  } catch (const std::exception& e) {
    report_write_failure(e);
  }
}

void ProcessSession::write_running(const std::string& reason, const std::string& tag) {
  sample_driver();
  snap::Snapshot s = snapshot(reason, std::nullopt);
  s.tool->tag = tag;
  extra_files_.push_back(write(s));
}

int64_t ProcessSession::now_us() const {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t mono =
      static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
  const auto& h = ring_->header();
  return (static_cast<int64_t>(h.start_realtime_ns) +
          static_cast<int64_t>(mono - h.start_monotonic_ns)) /
         1000;
}

void ProcessSession::sample_driver(bool at_exit) {
  if (opts_.driver_memory && opts_.driver_memory->available()) {
    add_driver_usage(opts_.driver_memory->sample(info_.pid), true, at_exit);
  }
}

void ProcessSession::measure_context(int device) {
  if (!opts_.driver_memory || !opts_.driver_memory->available()) return;
  const auto usage = opts_.driver_memory->sample(info_.pid);
  add_driver_usage(usage, true);
  const auto now = by_ordinal(usage);
  // A process NVML does not list on the device (another pid namespace) is not measured.
  if (auto it = now.find(device); it != now.end()) model_.measure_new_context(it->second);
}

std::map<int, uint64_t> ProcessSession::by_ordinal(const std::vector<DriverUsage>& usage) const {
  // NVML numbers devices its own way; the process's CUDA ordinals are matched by PCI address
  // (the process announces each ordinal with its first event). A device it has not announced
  // yet (a context whose creation was not seen and without allocations, or an announcement still
  // in the ring) cannot be named in its numbering and waits; only where NVML gives no PCI address
  // do its indices stand in.
  std::map<int64_t, int> ordinal_of;
  for (const auto& [ordinal, bus] : model_.device_pci_bus_ids()) ordinal_of[pci_key(bus)] = ordinal;
  std::map<int, uint64_t> now;
  for (const auto& u : usage) {
    auto it = u.pci >= 0 ? ordinal_of.find(u.pci) : ordinal_of.end();
    if (it != ordinal_of.end()) {
      now[it->second] += u.used_bytes;
    } else if (u.pci < 0) {
      now[u.device] += u.used_bytes;
    }
  }
  return now;
}

void ProcessSession::add_driver_usage(const std::vector<DriverUsage>& usage, bool force,
                                      bool at_exit) {
  const int64_t t = now_us();
  std::map<int, uint64_t> now = by_ordinal(usage);
  // A device the process left (its context destroyed) reads as 0 from then on.
  for (const auto& [device, last] : driver_last_) {
    if (last && !now.count(device) && !at_exit) now[device] = 0;
  }
  for (const auto& [device, used] : now) {
    auto it = driver_last_.find(device);
    if (force || it == driver_last_.end() || it->second != used) {
      driver_samples_.push_back(snap::DriverMemorySample{t, device, used});
      driver_last_[device] = used;
    }
  }
}

void ProcessSession::drain_all() {
  while (drain() == kDrainBatch) {
  }
}

// Whether the process's address space still holds this ring. The kernel unmaps it (exit_mm,
// exec) before it closes the descriptors of an exiting or exec'ing process, so after the liveness
// socket's EOF a mapped ring means the program closed the socket itself and runs on.
bool ProcessSession::maps_ring() const {
  std::ifstream maps(fmt::format("/proc/{}/maps", info_.pid));
  const std::string inode = fmt::format(" {} ", ring_->inode());
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("/memfd:cumemtrace-ring") != std::string::npos &&
        line.find(inode) != std::string::npos) {
      return true;
    }
  }
  return false;
}

void ProcessSession::follow(std::chrono::steady_clock::time_point now) {
  if (!followed_ || now < next_follow_check_) return;
  next_follow_check_ = now + std::chrono::milliseconds(50);
  if (!maps_ring()) close_live();
}

void ProcessSession::close_live() {
  drain_all();
  if (live_fd_ >= 0) ::close(live_fd_);
  live_fd_ = -1;
  if (!followed_ && !model_.exited() && maps_ring()) {
    followed_ = true;
    next_follow_check_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
    return;
  }
  followed_ = false;
  // exit() was seen in the ring: that is the answer, and it may be a while before the process
  // (with its atexit work and address space teardown) is a zombie.
  proc_end_ = model_.exited() ? snap::Ended{"exit", model_.exit_status(), 0}
                              : observe_from_proc(info_.pid, info_.argv);
  drain_all();
}

size_t ProcessSession::ring_bytes() const {
  return wire::ring_bytes(ring_->header().capacity);
}

uint64_t ProcessSession::dropped() const {
  return ring_->dropped();
}

snap::Ended ProcessSession::observed_end() const {
  return proc_end_;
}

void ProcessSession::mark_exec() {
  proc_end_ = snap::Ended{"exec", 0, 0};
}

snap::Snapshot ProcessSession::snapshot(const std::string& reason,
                                        const std::optional<snap::Ended>& ended, bool symbolize) {
  const auto start = std::chrono::steady_clock::now();
  snap::Snapshot s = symbolize ? model_.build(info_, symbolizer_) : model_.build(info_);
  spdlog::debug(
      "pid {}: {} snapshot built (symbolized) in {:.1f} ms", info_.pid, reason,
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  s.tool->reason = reason;
  s.tool->tool_version = CUMEMTRACE_VERSION;
  s.tool->events_dropped = ring_->dropped();
  s.tool->ring_error = error_;
  s.tool->time_resolution_ns = time_resolution_ns_;
  s.tool->driver_memory = driver_samples_;
  if (ended) s.tool->ended = *ended;
  // What each byte is for, decided once here so that every reader of the file (memory_viz's
  // legend, report, check, diff) reads the same answer (pytorch/categories.h).
  analysis::label_categories(s);
  // PyTorch's block bytes for what the collector itself reads of it (never written: the file
  // keeps PyTorch's requested sizes, and every reader labels its own), and the segments' blocks
  // as the replay found them.
  analysis::label_block_sizes(s);
  analysis::tile_blocks_as_replayed(s);
  return s;
}

std::string ProcessSession::write(const snap::Snapshot& s) {
  const std::string& reason = s.tool->reason;
  const std::string suffix = !s.tool->tag.empty() ? "." + s.tool->tag
                             : reason == "exit"   ? ""
                                                  : "." + reason;
  // A rank of a job is in the name, where a user looks for it among a job's files.
  const analysis::RankIdentity id = analysis::rank_identity(s);
  const std::string rank = id.known() ? fmt::format("rank{}.", id.rank) : std::string();
  if (opts_.budget) opts_.budget->make_room();
  const std::string path =
      snap::write_snapshot_file(s, fmt::format("{}/{}.{}{}{}.json", opts_.output_dir,
                                               base_name(info_.exe), rank, info_.pid, suffix));
  spdlog::debug("pid {}: wrote {}", info_.pid, path);
  if (opts_.budget) {
    static const std::map<std::string, WindowKind> kinds = {
        {"request", WindowKind::kRequest}, {"periodic", WindowKind::kPeriodic},
        {"growth", WindowKind::kGrowth},   {"peak", WindowKind::kPeak},
        {"oom", WindowKind::kOom},         {"exit", WindowKind::kExit}};
    const auto k = kinds.find(reason);
    opts_.budget->add(path, k != kinds.end() ? k->second : WindowKind::kRequest, info_.pid);
  }
  return path;
}

}  // namespace cumemtrace::collect
