#include "viz/report_model.h"

#include <algorithm>
#include <array>
#include <bit>
#include <map>
#include <numeric>
#include <set>
#include <unordered_map>

#include "analysis/breakdown_format.h"
#include "analysis/frames.h"
#include "pytorch/phases.h"

namespace cumemtrace::viz {

namespace {

using analysis::Allocation;

// Site index of every stack, plus one for "no stack" and one for "before the trace".
struct SiteIndex {
  std::vector<int> of_stack;
  std::vector<std::string> labels;
  int no_stack = 0;
  int before_trace = 0;

  explicit SiteIndex(const analysis::SiteTable& t) {
    const auto& s = t.snapshot();
    std::unordered_map<std::string, int> ids;
    auto id = [&](const std::string& label) {
      auto [it, inserted] = ids.try_emplace(label, static_cast<int>(labels.size()));
      if (inserted) labels.push_back(label);
      return it->second;
    };
    of_stack.reserve(s.stacks.size());
    for (size_t i = 0; i < s.stacks.size(); ++i)
      of_stack.push_back(id(t.site(static_cast<int32_t>(i))));
    no_stack = id(analysis::kNoStackSite);
    before_trace = id(analysis::kBeforeTraceSite);
  }

  int site(const Allocation& a) const {
    if (a.stack < 0 || static_cast<size_t>(a.stack) >= of_stack.size())
      return a.before_trace ? before_trace : no_stack;
    return of_stack[static_cast<size_t>(a.stack)];
  }
};

LiveTable make_table(const analysis::Attributed& parts, const SiteIndex& sites,
                     const ReportOptions& opt) {
  const auto& live = parts.allocations;
  struct Acc {
    uint64_t bytes = 0, count = 0;
    std::unordered_map<int32_t, StackShare> stacks;
  };
  std::unordered_map<int, Acc> by_site;
  LiveTable t;
  for (const auto& b : live) {
    auto& a = by_site[sites.site(b)];
    a.bytes += b.size;
    a.count += 1;
    auto& st = a.stacks[b.stack];
    st.stack = b.stack;
    st.bytes += b.size;
    st.count += 1;
    t.bytes += b.size;
    t.count += 1;
  }
  std::vector<std::pair<int, Acc*>> order;
  for (auto& [site, acc] : by_site) order.emplace_back(site, &acc);
  std::sort(order.begin(), order.end(), [&](const auto& x, const auto& y) {
    if (x.second->bytes != y.second->bytes) return x.second->bytes > y.second->bytes;
    return sites.labels[x.first] < sites.labels[y.first];
  });
  for (size_t i = 0; i < order.size(); ++i) {
    const Acc& a = *order[i].second;
    if (i >= opt.max_groups) {
      t.rest_bytes += a.bytes;
      t.rest_groups += 1;
      continue;
    }
    SiteGroup g{sites.labels[order[i].first], a.bytes, a.count, {}};
    for (const auto& [stack, share] : a.stacks) g.stacks.push_back(share);
    std::sort(g.stacks.begin(), g.stacks.end(), [](const StackShare& x, const StackShare& y) {
      return x.bytes != y.bytes ? x.bytes > y.bytes : x.stack < y.stack;
    });
    if (g.stacks.size() > opt.max_stacks) g.stacks.resize(opt.max_stacks);
    t.groups.push_back(std::move(g));
  }
  if (parts.has_cache) t.cached_free = parts.cached_free;
  return t;
}

// The category series, in the order they stack (report_model.h): PyTorch's tensors by category,
// then other libraries and PyTorch's cache.
constexpr std::array<const char*, 15> kCategorySeries = {"parameter",
                                                         "parameter_unsharded",
                                                         "gradient",
                                                         "optimizer_state",
                                                         "activation",
                                                         "kv_cache",
                                                         "temporary",
                                                         "input",
                                                         "autograd",
                                                         "communication",
                                                         "cublas_workspace",
                                                         "program",
                                                         "unknown",
                                                         "library",
                                                         "cache"};
constexpr size_t kLibrarySeries = 13;
constexpr size_t kCacheSeries = 14;

size_t category_series(snap::Category c) {
  switch (c) {
    case snap::Category::kParameter:
      return 0;
    case snap::Category::kParameterUnsharded:
      return 1;
    case snap::Category::kGradient:
      return 2;
    case snap::Category::kOptimizerState:
      return 3;
    case snap::Category::kActivation:
      return 4;
    case snap::Category::kKvCache:
      return 5;
    case snap::Category::kTemporary:
      return 6;
    case snap::Category::kInput:
      return 7;
    case snap::Category::kAutograd:
      return 8;
    case snap::Category::kCommunication:
      return 9;
    case snap::Category::kCublasWorkspace:
      return 10;
    case snap::Category::kProgram:
      return 11;
    case snap::Category::kLibrary:
      return kLibrarySeries;
    default:
      return 12;  // unknown, and a tensor without a category in a file with them
  }
}

// Keeps the category series that hold bytes at some point, in their order.
void drop_empty_series(ReportDevice& d) {
  std::vector<size_t> keep;
  for (size_t k = 0; k < d.series.size(); ++k) {
    bool any = false;
    for (const auto& p : d.points) any = any || (k < p.series.size() && p.series[k]);
    if (any) keep.push_back(k);
  }
  std::vector<std::string> names;
  for (size_t k : keep) names.push_back(d.series[k]);
  for (auto& p : d.points) {
    std::vector<uint64_t> v;
    for (size_t k : keep) v.push_back(k < p.series.size() ? p.series[k] : 0);
    p.series = std::move(v);
  }
  d.series = std::move(names);
}

constexpr std::string_view kAutoPrefix = "auto:";
// The phases the strip above the plot shows (pytorch/phases.h's spans; setup and data are the
// loop's own stretches and stay blank).
constexpr std::array<std::string_view, 5> kStripPhases = {"forward", "loss", "backward",
                                                          "optimizer", "zero_grad"};

// Past max_buckets phases, each of max_buckets time buckets shows the phases that ran in it side
// by side, each as wide as its share of the bucket (kStripPhases), neighbours of one phase
// merged: at most 5 x max_buckets, whatever the step count, and a bucket of many steps still
// shows their mix.
void merge_phases(ReportDevice& d, const ReportOptions& opt) {
  const size_t nb = std::max<size_t>(1, opt.max_buckets);
  if (d.phases.size() <= nb) return;
  const double span = static_cast<double>(std::max<int64_t>(1, d.x_end - d.x_begin));
  const double width = span / static_cast<double>(nb);
  const auto& names = kStripPhases;
  std::vector<std::array<double, kStripPhases.size()>> cover(nb);
  for (auto& c : cover) c.fill(0);
  for (const auto& p : d.phases) {
    const size_t k =
        static_cast<size_t>(std::find(names.begin(), names.end(), p.name) - names.begin());
    const double a = static_cast<double>(std::clamp(p.start, d.x_begin, d.x_end) - d.x_begin);
    const double b = static_cast<double>(std::clamp(p.end, d.x_begin, d.x_end) - d.x_begin);
    for (auto i = static_cast<size_t>(a / width); i < nb && static_cast<double>(i) * width < b;
         ++i) {
      const double lo = std::max(a, static_cast<double>(i) * width);
      const double hi = std::min(b, static_cast<double>(i + 1) * width);
      if (hi > lo) cover[i][k] += hi - lo;
    }
  }
  std::vector<Phase> merged;
  for (size_t i = 0; i < nb; ++i) {
    double at = static_cast<double>(i) * width;
    for (size_t k = 0; k < names.size(); ++k) {
      if (cover[i][k] <= 0) continue;
      const auto start = d.x_begin + static_cast<int64_t>(at);
      at += cover[i][k];
      const auto end = d.x_begin + static_cast<int64_t>(at);
      if (!merged.empty() && merged.back().name == names[k] && merged.back().end >= start)
        merged.back().end = end;
      else
        merged.push_back({std::string(names[k]), start, end});
    }
  }
  d.phases = std::move(merged);
}

void add_marks(ReportDevice& d, const analysis::AnalysedSnapshot& view,
               const std::set<int>& devices, const ReportOptions& opt) {
  const snap::Snapshot& s = view.snapshot();
  if (!d.time_axis) return;  // no clock to place them on
  std::map<std::string, std::vector<int64_t>> open;
  for (const auto& a : s.annotations) {
    // Marks for a device with no trace (or none) belong to every chart.
    if (a.device != d.device && devices.count(a.device)) continue;
    if (a.name.starts_with(kAutoPrefix)) {  // the automatic phases, apart from the user's marks
      const std::string phase = a.name.substr(kAutoPrefix.size());
      if (phase == "step" && a.stage != "START" && a.stage != "END")
        d.steps.push_back({a.time_us, ++d.step_count});
      continue;  // the phases themselves: from the analysis below
    }
    if (a.stage == "START") {
      open[a.name].push_back(a.time_us);
    } else if (a.stage == "END") {
      auto it = open.find(a.name);
      if (it == open.end() || it->second.empty()) continue;
      d.bands.push_back({a.name, it->second.back(), a.time_us});
      it->second.pop_back();
    } else {
      d.marks.push_back({a.name, a.time_us});
    }
  }
  for (const auto& [name, starts] : open)
    for (int64_t start : starts) d.bands.push_back({name, start, std::max(start, d.x_end)});
  if (d.bands.size() > opt.max_bands) {
    std::nth_element(
        d.bands.begin(), d.bands.begin() + static_cast<ptrdiff_t>(opt.max_bands), d.bands.end(),
        [](const Band& a, const Band& b) { return a.end - a.start > b.end - b.start; });
    d.bands_dropped = d.bands.size() - opt.max_bands;
    d.bands.resize(opt.max_bands);
  }
  std::sort(d.bands.begin(), d.bands.end(),
            [](const Band& a, const Band& b) { return a.start < b.start; });
  // Marks past the cap are thinned evenly, so the ones drawn still span the run.
  if (d.marks.size() > opt.max_bands) {
    std::vector<Mark> kept;
    for (size_t i = 0; i < opt.max_bands; ++i)
      kept.push_back(d.marks[i * d.marks.size() / opt.max_bands]);
    d.bands_dropped += d.marks.size() - kept.size();
    d.marks = std::move(kept);
  }
  if (d.steps.size() > opt.max_bands) {
    std::vector<StepMark> kept;
    for (size_t i = 0; i < opt.max_bands; ++i)
      kept.push_back(d.steps[i * d.steps.size() / opt.max_bands]);
    d.steps = std::move(kept);
  }
  // The phases as the analysis cuts them (one truth: the ledger's spans, nested phases
  // innermost); one still open at the end of the trace (a program killed mid-step) lasts to the
  // end. The rectangles abut: each ends where the next span begins.
  const analysis::Phases& ph = analysis::phases_of(view);
  if (ph.automatic()) {
    for (const auto& sp : ph.spans()) {
      const auto name = analysis::phase_name(sp.phase);
      if (std::find(kStripPhases.begin(), kStripPhases.end(), name) == kStripPhases.end()) continue;
      const int64_t end =
          sp.end_us == analysis::kTimeMax ? std::max(sp.begin_us, d.x_end) : sp.end_us;
      d.phases.push_back({std::string(name), sp.begin_us, end});
    }
  }
  std::sort(d.phases.begin(), d.phases.end(),
            [](const Phase& a, const Phase& b) { return a.start < b.start; });
  d.phase_count = d.phases.size();
  merge_phases(d, opt);
}

// Entry `i`'s place on the x axis (-1: before the first entry). Clocks of different threads can
// step back a little; the x axis never does.
int64_t x_of(const ReportDevice& d, const std::vector<snap::TraceEntry>& tr, std::ptrdiff_t i) {
  if (i < 0) return d.x_begin;
  return d.time_axis ? std::clamp(tr[static_cast<size_t>(i)].time_us, d.x_begin, d.x_end)
                     : static_cast<int64_t>(i + 1);
}

// The device's counts, its x axis (time where the entries span some, else entry ordinals), its
// peaks and layers.
void fill_axis_and_peaks(ReportDevice& d, const snap::Snapshot& s, const analysis::DeviceReplay& rp,
                         const analysis::SiteTable& table) {
  const auto& tl = rp.timeline();
  const auto& tr = rp.trace();
  d.entries = tr.size();
  d.allocations = tl.allocations;
  d.frees = tl.frees;
  d.requests = tl.requests;
  d.tensors_apart = analysis::tensors_apart(tl, rp.flavor());
  int64_t tmin = INT64_MAX, tmax = INT64_MIN;
  for (const auto& e : tr) {
    tmin = std::min(tmin, e.time_us);
    tmax = std::max(tmax, e.time_us);
  }
  d.time_axis = !tr.empty() && tmax > tmin;
  d.x_begin = d.time_axis ? tmin : 0;
  d.x_end = d.time_axis ? tmax : static_cast<int64_t>(tr.size());
  d.time_origin = d.time_axis ? analysis::time_origin(s) : 0;
  d.peak_bytes = tl.highest_known().bytes;
  d.peak_x = d.time_axis ? std::clamp(tl.highest_known().time_us, tmin, tmax)
                         : x_of(d, tr, tl.trace.index);
  d.peak_reserved = tl.reserved.bytes;
  d.allocated_line = tl.has_reserved && rp.flavor() == analysis::Flavor::kCumemtrace;
  d.pool_layer = tl.pool_layer;
  d.driver_line = tl.has_driver;
  d.peak_allocated = tl.allocated.bytes;
  d.peak_driver = tl.driver.bytes;
  d.layers = rp.breakdowns(table);
}

void fill_sizes_and_ooms(ReportDevice& d, const analysis::DeviceReplay& rp,
                         const ReportOptions& opt) {
  const auto& tr = rp.trace();
  std::map<int, SizeBucket> sizes;
  for (const auto& e : tr) {
    if (e.action == snap::Action::kOom) {
      // A program retrying after OOMs can log thousands; the first ones tell the story.
      if (d.ooms.size() < opt.max_bands)
        d.ooms.push_back({x_of(d, tr, &e - tr.data()), e.size, e.device_free});
      d.oom_count += 1;
    }
    if (!analysis::is_request(rp.flavor(), e)) continue;
    const int lg = e.size ? std::bit_width(e.size) - 1 : 0;
    auto& b = sizes[lg];
    b.log2 = lg;
    b.count += 1;
    b.bytes += e.size;
  }
  for (const auto& [lg, b] : sizes) d.sizes.push_back(b);
}

// Which series an allocation's bytes are drawn in: its category's, or its site's (the top sites
// by byte-time, the rest in "other").
struct SeriesOf {
  bool by_category = false;
  std::vector<int> of_site;
  const SiteIndex* sites = nullptr;

  size_t operator()(const Allocation& a) const {
    if (by_category) return a.pytorch ? category_series(a.category) : kLibrarySeries;
    return static_cast<size_t>(of_site[static_cast<size_t>(sites->site(a))]);
  }
};

// PyTorch's own files: the units are its tensors, its segments the reserved layer; the cache is
// what is reserved beyond them, drawn as its own band on top.
bool reserved_cache(const analysis::DeviceReplay& rp) {
  return !rp.splits_tensors() && rp.flavor() == analysis::Flavor::kTorch &&
         rp.timeline().has_reserved && !rp.timeline().pool_layer;
}

// Pass 1: byte-time per site, for choosing the series (by their own peak when nothing spans
// time); fills d.series.
SeriesOf choose_series(ReportDevice& d, const analysis::DeviceReplay& rp, const SiteIndex& sites,
                       const ReportOptions& opt) {
  const auto& tr = rp.trace();
  const size_t nsites = d.by_category ? 0 : sites.labels.size();
  std::vector<uint64_t> site_live(nsites, 0);
  std::vector<int64_t> site_since(nsites, d.x_begin);
  std::vector<double> site_area(nsites, 0.0);
  std::vector<uint64_t> site_max(nsites, 0);
  // Where PyTorch's segments are split, its tensors are what is stacked (never a segment at the
  // line of the tensor that made it grow); other libraries' allocations as they are.
  const bool split = rp.splits_tensors();
  if (!d.by_category) {
    if (split) {
      analysis::DeviceReplay::Cursor start(rp);
      for (const auto& a : start.attributed().allocations)
        site_live[static_cast<size_t>(sites.site(a))] += a.size;
    } else {
      for (const auto& b : rp.start_live()) site_live[static_cast<size_t>(sites.site(b))] += b.size;
    }
  }
  for (size_t i = 0; i < nsites; ++i) site_max[i] = site_live[i];
  auto touch = [&](int site, int64_t x, int64_t delta) {
    const auto k = static_cast<size_t>(site);
    site_area[k] += static_cast<double>(site_live[k]) * static_cast<double>(x - site_since[k]);
    site_since[k] = x;
    site_live[k] = static_cast<uint64_t>(static_cast<int64_t>(site_live[k]) + delta);
    site_max[k] = std::max(site_max[k], site_live[k]);
  };
  if (!d.by_category) {
    analysis::DeviceReplay::Cursor c(rp);
    while (c.step()) {
      const int64_t x = x_of(d, tr, c.index());
      for (const auto& ch : c.changes()) {
        if (split && ch.unit.pytorch) continue;
        const auto size = static_cast<int64_t>(ch.unit.size);
        touch(sites.site(ch.unit), x, ch.added ? size : -size);
      }
      if (!split) continue;
      for (const auto& ch : c.tensor_changes()) {
        const auto size = static_cast<int64_t>(ch.unit.size);
        touch(sites.site(ch.unit), x, ch.added ? size : -size);
      }
    }
  }
  for (size_t i = 0; i < nsites; ++i) touch(static_cast<int>(i), d.x_end, 0);

  std::vector<int> ranked;
  for (size_t i = 0; i < nsites; ++i)
    if (site_max[i] > 0) ranked.push_back(static_cast<int>(i));
  std::sort(ranked.begin(), ranked.end(), [&](int a, int b) {
    const auto ka = static_cast<size_t>(a), kb = static_cast<size_t>(b);
    if (site_area[ka] != site_area[kb]) return site_area[ka] > site_area[kb];
    if (site_max[ka] != site_max[kb]) return site_max[ka] > site_max[kb];
    return sites.labels[ka] < sites.labels[kb];
  });
  const size_t shown = ranked.size() <= opt.top_sites + 1 ? ranked.size() : opt.top_sites;
  SeriesOf series{d.by_category, std::vector<int>(nsites, static_cast<int>(shown)), &sites};
  for (size_t i = 0; i < shown; ++i) {
    series.of_site[static_cast<size_t>(ranked[i])] = static_cast<int>(i);
    d.series.push_back(sites.labels[static_cast<size_t>(ranked[i])]);
  }
  if (ranked.size() > shown) d.series.push_back("other");
  if (d.by_category) d.series.assign(kCategorySeries.begin(), kCategorySeries.end());
  d.cache_series = split || reserved_cache(rp);
  if (d.cache_series && !d.by_category) d.series.push_back("cache");
  return series;
}

// The bytes live in each series as the replay steps. Where PyTorch's segments are split, its
// segments' bytes count as its tensors (by their categories or sites) and the rest as its cache.
class SeriesLive {
 public:
  SeriesLive(const ReportDevice& d, const analysis::DeviceReplay& rp, const SeriesOf& series)
      : series_(series),
        split_(rp.splits_tensors()),
        cache_(d.by_category ? kCacheSeries : d.series.size() - 1),
        live_(std::max<size_t>(d.series.size(), 1), 0) {
    if (split_) {
      analysis::DeviceReplay::Cursor start(rp);
      for (const auto& a : start.attributed().allocations) {
        live_[series_(a)] += a.size;
        if (a.pytorch) tensor_bytes_ += a.size;
      }
      for (const auto& b : rp.start_live())
        if (b.pytorch) segment_bytes_ += b.size;
    } else {
      for (const auto& b : rp.start_live()) live_[series_(b)] += b.size;
    }
    update_cache();
  }

  const std::vector<uint64_t>& live() const { return live_; }

  void apply(const analysis::DeviceReplay::Cursor& c) {
    for (const auto& ch : c.changes()) {
      if (split_ && ch.unit.pytorch) {
        segment_bytes_ = ch.added ? segment_bytes_ + ch.unit.size : segment_bytes_ - ch.unit.size;
        continue;
      }
      auto& v = live_[series_(ch.unit)];
      v = ch.added ? v + ch.unit.size : v - ch.unit.size;
    }
    if (split_) {
      for (const auto& ch : c.tensor_changes()) {
        auto& v = live_[series_(ch.unit)];
        v = ch.added ? v + ch.unit.size : v - ch.unit.size;
        tensor_bytes_ = ch.added ? tensor_bytes_ + ch.unit.size : tensor_bytes_ - ch.unit.size;
      }
      update_cache();
    }
  }

 private:
  void update_cache() {
    if (split_) live_[cache_] = segment_bytes_ > tensor_bytes_ ? segment_bytes_ - tensor_bytes_ : 0;
  }

  const SeriesOf& series_;
  const bool split_;
  const size_t cache_;  // the cache's series, where split_
  std::vector<uint64_t> live_;
  uint64_t segment_bytes_ = 0, tensor_bytes_ = 0;
};

// The timeline downsampled to at most opt.max_buckets buckets: half of them cut the trace's
// entries evenly, half its time span, a bucket ending at either cut. Entry cuts give a busy
// stretch (the training steps) its resolution whatever idle time surrounds it, so the page's step
// and event axes are drawn from enough points; time cuts keep a bucket from spanning an idle gap.
// A bucket draws as its highest state from that moment to its last entry (so a spike shorter than
// a pixel still shows), then its last state, which holds through any idle gap after it.
class Downsampler {
 public:
  Downsampler(ReportDevice& d, const ReportOptions& opt)
      : d_(d),
        span_(static_cast<double>(std::max<int64_t>(1, d.x_end - d.x_begin + 1))),
        entries_(static_cast<double>(std::max<size_t>(1, d.entries))),
        cuts_(std::max<size_t>(1, opt.max_buckets / 2)) {}

  // The bucket of entry i at x, flushing the previous one when it starts a new one.
  void enter(std::ptrdiff_t i, int64_t x) {
    const double n = static_cast<double>(cuts_);
    const auto by_entry = std::min(
        cuts_ - 1,
        static_cast<size_t>(static_cast<double>(std::max<std::ptrdiff_t>(i, 0)) / entries_ * n));
    const auto by_time =
        std::min(cuts_ - 1, static_cast<size_t>(static_cast<double>(x - d_.x_begin) / span_ * n));
    if (by_entry != entry_cut_ || by_time != time_cut_) {
      flush();
      entry_cut_ = by_entry;
      time_cut_ = by_time;
    }
  }

  void add(TimelinePoint p) {
    if (have_best_ && same(p, last_)) return;
    last_ = std::move(p);
    if (!have_best_ || height(last_) > height(best_)) {
      best_ = last_;
      have_best_ = true;
    }
  }

  void flush() {
    if (!have_best_) return;
    d_.points.push_back(best_);
    if (!same(last_, best_)) d_.points.push_back(last_);
    have_best_ = false;
  }

 private:
  // What a bucket's highest moment is highest in: the live bytes, or where PyTorch's cache is a
  // band of its own, what is stacked under it (the tensors and other libraries: PyTorch's
  // segments, the total then, hardly move while its tensors rise and fall every step).
  uint64_t height(const TimelinePoint& p) const {
    if (!d_.cache_series || p.series.empty()) return p.total;
    return std::accumulate(p.series.begin(), p.series.end() - 1, uint64_t{0});
  }

  static bool same(const TimelinePoint& a, const TimelinePoint& b) {
    // The series too: a tensor made inside a cached segment changes no total.
    return a.total == b.total && a.reserved == b.reserved && a.allocated == b.allocated &&
           a.driver == b.driver && a.series == b.series;
  }

  ReportDevice& d_;
  const double span_, entries_;
  const size_t cuts_;
  size_t entry_cut_ = SIZE_MAX, time_cut_ = SIZE_MAX;
  TimelinePoint best_, last_;
  bool have_best_ = false;
};

// Pass 2: the downsampled timeline and the live set at the peak.
void fill_timeline(ReportDevice& d, const analysis::DeviceReplay& rp, const SiteIndex& sites,
                   const SeriesOf& series, const ReportOptions& opt) {
  const auto& tl = rp.timeline();
  SeriesLive live(d, rp, series);
  auto point = [&](std::ptrdiff_t i) {
    TimelinePoint p{
        x_of(d, rp.trace(), i),      rp.bytes_after(i), rp.reserved_after(i), 0, 0, live.live(),
        static_cast<uint64_t>(i + 1)};
    if (d.allocated_line) p.allocated = rp.allocated_after(i);
    if (reserved_cache(rp) && !p.series.empty())
      p.series.back() = p.reserved > p.total ? p.reserved - p.total : 0;
    if (d.driver_line) p.driver = rp.driver_at(rp.time_after(i)).value_or(0);
    return p;
  };
  d.points.push_back(point(-1));
  if (tl.trace.index < 0) {
    analysis::DeviceReplay::Cursor start(rp);
    d.at_peak = make_table(start.attributed(), sites, opt);
  }
  Downsampler down(d, opt);
  analysis::DeviceReplay::Cursor c(rp);
  while (c.step()) {
    const std::ptrdiff_t i = c.index();
    down.enter(i, x_of(d, rp.trace(), i));
    live.apply(c);
    if (i == tl.trace.index) d.at_peak = make_table(c.attributed(), sites, opt);
    down.add(point(i));
  }
  down.flush();
}

ReportDevice build_device(const analysis::AnalysedSnapshot& view, int device,
                          const analysis::SiteTable& table, const SiteIndex& sites,
                          const std::vector<Allocation>& held, const std::set<int>& devices,
                          const ReportOptions& opt) {
  const snap::Snapshot& s = view.snapshot();
  const analysis::DeviceReplay& rp = view.replay(device);
  ReportDevice d;
  d.device = device;
  fill_axis_and_peaks(d, s, rp, table);
  fill_sizes_and_ooms(d, rp, opt);
  // The series: categories when the file has them (report_model.h), else sites.
  for (const auto& e : rp.trace())
    d.by_category = d.by_category || e.category != snap::Category::kNone;
  const SeriesOf series = choose_series(d, rp, sites, opt);
  fill_timeline(d, rp, sites, series, opt);
  std::vector<Allocation> held_here;
  for (const auto& a : held)
    if (a.device == device) held_here.push_back(a);
  d.at_exit = make_table(analysis::Attributed{held_here, 0, false}, sites, opt);
  d.at_exit.count_text = analysis::live_count_text(analysis::count_live(held_here));
  if (rp.splits_tensors()) {
    for (const auto& b : d.layers)
      if (b.moment == "exit") d.at_exit.cached_free = b.cached_free;
  }
  if (d.by_category) drop_empty_series(d);
  // The peak's live set is the device's memory: PyTorch's tensors and cache (where its segments
  // are split) and every other driver allocation.
  d.at_peak.count_text = analysis::plural(d.at_peak.count, "allocation");
  add_marks(d, view, devices, opt);
  return d;
}

}  // namespace

ReportModel build_report_model(const analysis::AnalysedSnapshot& view, const ReportOptions& opt) {
  const snap::Snapshot& s = view.snapshot();
  const analysis::SiteTable table(s);
  const SiteIndex sites(table);
  const auto held = analysis::live_at_exit(s);
  ReportModel m;
  std::set<int> devices;
  const int n = analysis::device_count(s);
  for (int d = 0; d < n; ++d) {
    const bool traced = static_cast<size_t>(d) < s.device_traces.size() &&
                        !s.device_traces[static_cast<size_t>(d)].empty();
    bool has = traced;
    for (const auto& g : s.segments) has = has || g.device == d;
    for (const auto& a : held) has = has || a.device == d;
    if (s.tool)
      for (const auto& x : s.tool->driver_memory) has = has || x.device == d;
    if (has) devices.insert(d);
  }
  for (int device : devices)
    m.devices.push_back(build_device(view, device, table, sites, held, devices, opt));
  m.ooms = analysis::oom_verdicts(view, table);
  std::set<int32_t> used;
  for (const auto& v : m.ooms)
    if (v.stack >= 0 && static_cast<size_t>(v.stack) < s.stacks.size()) used.insert(v.stack);
  for (const auto& d : m.devices)
    for (const auto* t : {&d.at_peak, &d.at_exit})
      for (const auto& g : t->groups)
        for (const auto& st : g.stacks)
          if (st.stack >= 0 && static_cast<size_t>(st.stack) < s.stacks.size())
            used.insert(st.stack);
  for (int32_t id : used) {
    ReportStack rs{id, {}};
    // Full names: the page shows a stack when asked and searches it; site labels are short.
    for (const auto* f : analysis::visible_frames(s.stacks[static_cast<size_t>(id)]))
      rs.frames.push_back(*f);
    m.stacks.push_back(std::move(rs));
  }
  for (int depth = 1; depth <= 3; ++depth) {
    if (auto v = analysis::build_module_view(view, depth)) m.modules.push_back(std::move(*v));
  }
  return m;
}

}  // namespace cumemtrace::viz
