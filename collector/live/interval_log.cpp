#include "live/interval_log.h"

#include <algorithm>

#include "analysis/frames.h"

namespace cumemtrace::collect {

namespace {

// The top sites of the bytes allocated per stack: the heaviest stacks are labelled with the
// one site rule, stacks of one site merged, the heaviest sites kept.
nlohmann::json top_sites(TraceModel& m, Symbolizer& sym) {
  auto by_stack = m.take_stack_bytes();
  std::vector<std::pair<int32_t, uint64_t>> stacks(by_stack.begin(), by_stack.end());
  const size_t heaviest = std::min<size_t>(stacks.size(), 4 * IntervalLog::kTopSites);
  std::partial_sort(stacks.begin(), stacks.begin() + static_cast<std::ptrdiff_t>(heaviest),
                    stacks.end(), [](auto& a, auto& b) { return a.second > b.second; });
  std::map<std::string, uint64_t> by_site;
  for (size_t i = 0; i < heaviest; ++i) {
    std::string label = analysis::kNoStackSite;
    if (stacks[i].first >= 0) {
      const snap::Stack st = m.stack(stacks[i].first, sym);
      const int f = analysis::site_frame_index(st);
      if (f >= 0) label = analysis::format_frame(st[static_cast<size_t>(f)]);
    }
    by_site[label] += stacks[i].second;
  }
  std::vector<std::pair<std::string, uint64_t>> sites(by_site.begin(), by_site.end());
  std::stable_sort(sites.begin(), sites.end(),
                   [](auto& a, auto& b) { return a.second > b.second; });
  if (sites.size() > IntervalLog::kTopSites) sites.resize(IntervalLog::kTopSites);
  nlohmann::json out = nlohmann::json::array();
  for (auto& [site, bytes] : sites) out.push_back({{"site", site}, {"bytes_allocated", bytes}});
  return out;
}

}  // namespace

bool IntervalLog::after_record(TraceModel& m, Symbolizer& sym, int64_t t_us,
                               const std::map<int, uint64_t>& driver) {
  if (!t_us) return false;  // no timed record yet (module announcements carry none)
  if (!open_) {
    open_ = true;
    begin_us_ = t_us;
    steps_ = 0;
  }
  last_us_ = std::max(last_us_, t_us);
  const bool step = m.take_step_mark();
  if (step) {
    steps_seen_ = true;
    ++steps_;
  }
  // With iterations, intervals close only at their boundaries; without, an interval of 0 s
  // (one per iteration) stands for the default.
  const int64_t every = steps_seen_ || interval_us_ > 0 ? interval_us_ : kDefaultIntervalUs;
  const bool due = last_us_ - begin_us_ >= every;
  if (!due || (steps_seen_ && !step)) return false;
  close(m, sym, last_us_, driver);
  return true;
}

bool IntervalLog::tick(TraceModel& m, Symbolizer& sym, int64_t now_us,
                       const std::map<int, uint64_t>& driver) {
  if (!open_ || steps_seen_) return false;  // iterations close only at their boundaries
  const int64_t every = interval_us_ > 0 ? interval_us_ : kDefaultIntervalUs;
  bool closed = false;
  while (now_us - begin_us_ >= every) {
    const int64_t end = begin_us_ + every;
    close(m, sym, end, driver);
    // The next interval starts where this one ended, whether or not a record comes.
    open_ = true;
    begin_us_ = end;
    last_us_ = std::max(last_us_, end);
    steps_ = 0;
    closed = true;
  }
  return closed;
}

void IntervalLog::finish(TraceModel& m, Symbolizer& sym, const std::map<int, uint64_t>& driver) {
  // An interval tick() opened that no record reached says nothing: not closed.
  if (open_ && (m.events_total() > events_at_begin_ || last_us_ > begin_us_))
    close(m, sym, last_us_, driver);
}

bool IntervalLog::take_growth_start() {
  const bool was = growth_start_;
  growth_start_ = false;
  return was;
}

void IntervalLog::close(TraceModel& m, Symbolizer& sym, int64_t end_us,
                        const std::map<int, uint64_t>& driver) {
  const auto now = m.device_totals();
  nlohmann::json devices = nlohmann::json::array();
  uint64_t live_total = 0;
  for (size_t d = 0; d < now.size(); ++d) {
    const TraceModel::DeviceTotals was =
        d < at_begin_.size() ? at_begin_[d] : TraceModel::DeviceTotals{};
    const auto& n = now[d];
    live_total += n.live;
    if (n.allocations == was.allocations && n.frees == was.frees && !n.live) continue;
    nlohmann::json j = {{"device", d},
                        {"allocations", n.allocations - was.allocations},
                        {"frees", n.frees - was.frees},
                        {"bytes_allocated", n.bytes_allocated - was.bytes_allocated},
                        {"bytes_freed", n.bytes_freed - was.bytes_freed},
                        {"live_bytes", n.live},
                        {"peak_bytes", n.window_peak},
                        {"torch_reserved_bytes", n.torch_reserved}};
    if (auto it = driver.find(static_cast<int>(d)); it != driver.end()) {
      j["driver_visible_bytes"] = it->second;
    }
    devices.push_back(std::move(j));
  }
  intervals_.push_back({{"index", intervals_.size()},
                        {"begin_us", begin_us_},
                        {"end_us", end_us},
                        {"iterations", steps_},
                        {"events", m.events_total() - events_at_begin_},
                        {"torch_allocated_bytes", m.torch_allocated()},
                        {"devices", std::move(devices)},
                        {"top_sites", top_sites(m, sym)}});
  rises_ = live_total > last_live_total_ ? rises_ + 1 : 0;
  if (rises_ == kGrowthIntervals) growth_start_ = true;
  last_live_total_ = live_total;
  at_begin_ = now;
  events_at_begin_ = m.events_total();
  m.reset_window_peaks();
  open_ = false;
}

nlohmann::json IntervalLog::to_json() const {
  return nlohmann::json(intervals_);
}

}  // namespace cumemtrace::collect
