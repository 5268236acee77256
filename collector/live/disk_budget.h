// Contract: the cap on the bytes a bounded capture (`run --keep bounded`, CUMEMTRACE_KEEP=bounded)
// leaves on disk, one per collector, shared by every process it traces. Every file the capture
// writes is registered here with its kind. Before a file is written, make_room() drops windows
// until the total plus the largest window written so far fits the cap, so the cap holds while the
// new file is being written too; after it is written, add() drops again until the total fits.
// Windows are dropped in order of how little they say: the unremarkable ones (on request,
// periodic, sustained growth) first, then peak windows, then OOM windows; oldest first within a
// kind. A process's final snapshot and the interval summaries are never dropped (they are the
// run's result): when they alone exceed the cap the total stays above it and over_cap() says so.
// Every file dropped is kept in dropped() with why, for the summaries to name.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cumemtrace::collect {

// In the order they are dropped (kExit and kSummary never are).
enum class WindowKind { kRequest, kPeriodic, kGrowth, kPeak, kOom, kExit, kSummary };
const char* window_kind_name(WindowKind k);  // "request", "periodic", ..., "exit", "summary"

struct DiskFile {
  std::string path;
  WindowKind kind = WindowKind::kRequest;
  int pid = 0;
  uint64_t bytes = 0;
  uint64_t seq = 0;  // order of writing
  std::string why;   // dropped files only: "disk cap", "replaced by a higher peak"
};

class DiskBudget {
 public:
  explicit DiskBudget(uint64_t cap_bytes) : cap_(cap_bytes) {}

  uint64_t cap() const { return cap_; }
  uint64_t total() const { return total_; }
  bool over_cap() const { return total_ > cap_; }
  const std::vector<DiskFile>& kept() const { return kept_; }
  const std::vector<DiskFile>& dropped() const { return dropped_; }

  // Before writing a window: drop windows until the largest one so far would fit beside the rest.
  void make_room();
  // A file just written (its size is read from disk); a path registered already is updated (a
  // summary rewritten). Drops windows, never this one, until the total fits the cap.
  void add(const std::string& path, WindowKind kind, int pid);
  // Deletes a kept file and names it dropped with `why` (a peak window replaced by a higher one).
  void drop(const std::string& path, const std::string& why);

 private:
  bool drop_one(const std::string& keep, uint64_t need);
  void unlink_as(size_t index, const std::string& why);

  uint64_t cap_;
  uint64_t total_ = 0;
  uint64_t largest_window_ = 0;
  uint64_t seq_ = 0;
  std::vector<DiskFile> kept_;
  std::vector<DiskFile> dropped_;
};

}  // namespace cumemtrace::collect
