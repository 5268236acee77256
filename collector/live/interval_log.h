// Contract: a bounded capture's per-interval summaries of one process (written as
// EXE.PID.intervals.json, see docs/report.md "Bounded capture"), O(intervals) in memory and on
// disk. An interval starts at the first record after the previous one closed and closes after
// the record that ends it: in a program whose automatic phases mark iterations (an `auto:step`
// MARK, pytorch/phases.h), the first iteration boundary at least `interval_s` after its start
// (so an interval is whole iterations; interval_s 0: one interval per iteration); in any other
// program, the first record at least `interval_s` (program time; 10 s when 0) after its start,
// or, while the program records nothing, the collector's clock passing that mark (tick(): an idle
// program gets an interval per `interval_s` all the same, each starting where the last ended).
// finish() closes the last one. Per interval and device: the allocations and frees and their bytes
// (so that intervals add up exactly to the run's totals), the bytes live at the close, the highest
// live bytes within it, PyTorch's reserved bytes and the driver-visible bytes at the close; for
// the process, PyTorch's allocated bytes and the top allocation sites by bytes allocated
// (analysis/frames.h's site rule). growing() is true once total live bytes rose at each of
// kGrowthIntervals closes in a row (sustained growth), until a close that does not rise.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "live/symbolizer.h"
#include "live/trace_model.h"

namespace cumemtrace::collect {

class IntervalLog {
 public:
  static constexpr int kGrowthIntervals = 3;
  static constexpr size_t kTopSites = 5;
  static constexpr int64_t kDefaultIntervalUs = 10'000'000;

  explicit IntervalLog(double interval_s) : interval_us_(static_cast<int64_t>(interval_s * 1e6)) {}

  // After each record the model took (time `t_us`): true when it closed an interval.
  bool after_record(TraceModel& m, Symbolizer& sym, int64_t t_us,
                    const std::map<int, uint64_t>& driver);
  // The program's clock now (`now_us`, the records' time base) with every record up to it taken:
  // in a program without iterations, closes each interval whose span has passed, records or
  // not. True when it closed one.
  bool tick(TraceModel& m, Symbolizer& sym, int64_t now_us, const std::map<int, uint64_t>& driver);
  // Closes the open interval, if it holds any record (the process ended).
  void finish(TraceModel& m, Symbolizer& sym, const std::map<int, uint64_t>& driver);
  // Sustained growth: true from the close that makes it kGrowthIntervals rises in a row; a
  // caller writes one window per streak (take_growth_start).
  bool take_growth_start();
  size_t size() const { return intervals_.size(); }
  bool by_iteration() const { return steps_seen_; }
  nlohmann::json to_json() const;

 private:
  void close(TraceModel& m, Symbolizer& sym, int64_t end_us, const std::map<int, uint64_t>& driver);

  int64_t interval_us_;
  bool open_ = false;
  bool steps_seen_ = false;
  int64_t begin_us_ = 0;
  int64_t last_us_ = 0;
  int steps_ = 0;
  uint64_t events_at_begin_ = 0;
  std::vector<TraceModel::DeviceTotals> at_begin_;
  uint64_t last_live_total_ = 0;
  int rises_ = 0;
  bool growth_start_ = false;
  std::vector<nlohmann::json> intervals_;
};

}  // namespace cumemtrace::collect
