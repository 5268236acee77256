#include "viz/report_model.h"

#include <algorithm>
#include <bit>
#include <map>
#include <set>
#include <unordered_map>

#include "viz/allocation_site.h"
#include "viz/live_replay.h"

namespace cumemtrace::viz {

namespace {

// Site index of every stack, plus one for "no stack"; labels in `labels`.
struct SiteIndex {
  std::vector<int> of_stack;
  std::vector<std::string> labels;
  int no_stack = 0;

  explicit SiteIndex(const snap::Snapshot& s) {
    std::unordered_map<std::string, int> ids;
    auto id = [&](const std::string& label) {
      auto [it, inserted] = ids.try_emplace(label, static_cast<int>(labels.size()));
      if (inserted) labels.push_back(label);
      return it->second;
    };
    of_stack.reserve(s.stacks.size());
    for (size_t i = 0; i < s.stacks.size(); ++i)
      of_stack.push_back(id(site_label(s, static_cast<int32_t>(i))));
    no_stack = id(site_label(s, snap::kNoStack));
  }

  int site(int32_t stack) const {
    if (stack < 0 || static_cast<size_t>(stack) >= of_stack.size()) return no_stack;
    return of_stack[stack];
  }
};

LiveTable make_table(const std::unordered_map<uint64_t, LiveBlock>& live, const SiteIndex& sites,
                     const ReportOptions& opt) {
  struct Acc {
    uint64_t bytes = 0, count = 0;
    std::unordered_map<int32_t, StackShare> stacks;
  };
  std::unordered_map<int, Acc> by_site;
  LiveTable t;
  for (const auto& [addr, b] : live) {
    auto& a = by_site[sites.site(b.stack)];
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
  return t;
}

void add_marks(ReportDevice& d, const snap::Snapshot& s, const std::set<int>& devices,
               const ReportOptions& opt) {
  if (!d.time_axis) return;  // no clock to place them on
  std::map<std::string, std::vector<int64_t>> open;
  for (const auto& a : s.annotations) {
    // Marks for a device with no trace (or none) belong to every chart.
    if (a.device != d.device && devices.count(a.device)) continue;
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
}

ReportDevice build_device(const snap::Snapshot& s, int device, const SiteIndex& sites,
                          const std::set<int>& devices, const ReportOptions& opt) {
  static const std::vector<snap::TraceEntry> kNoTrace;
  const auto& tr =
      static_cast<size_t>(device) < s.device_traces.size() ? s.device_traces[device] : kNoTrace;
  const auto initial = preexisting_blocks(s, device);

  ReportDevice d;
  d.device = device;
  d.entries = tr.size();
  int64_t tmin = INT64_MAX, tmax = INT64_MIN;
  for (const auto& e : tr) {
    tmin = std::min(tmin, e.time_us);
    tmax = std::max(tmax, e.time_us);
  }
  d.time_axis = !tr.empty() && tmax > tmin;
  d.x_begin = d.time_axis ? tmin : 0;
  d.x_end = d.time_axis ? tmax : static_cast<int64_t>(tr.size());
  // Clocks of different threads can step back a little; the x axis never does.
  auto x_of = [&](size_t i) {
    return d.time_axis ? std::clamp(tr[i].time_us, tmin, tmax) : static_cast<int64_t>(i + 1);
  };

  // Pass 1: byte-time per site, the peak, sizes, OOMs.
  const size_t nsites = sites.labels.size();
  std::vector<uint64_t> site_live(nsites, 0);
  std::vector<int64_t> site_since(nsites, d.x_begin);
  std::vector<double> site_area(nsites, 0.0);
  std::vector<uint64_t> site_max(nsites, 0);
  std::map<int, SizeBucket> sizes;
  LiveTracker t1(initial);
  for (const auto& b : initial) site_live[sites.site(b.stack)] += b.size;
  for (size_t i = 0; i < nsites; ++i) site_max[i] = site_live[i];
  d.peak_bytes = t1.live_bytes();
  d.peak_x = d.x_begin;
  size_t peak_applied = 0;
  auto touch = [&](int site, int64_t x, int64_t delta) {
    site_area[site] +=
        static_cast<double>(site_live[site]) * static_cast<double>(x - site_since[site]);
    site_since[site] = x;
    site_live[site] = static_cast<uint64_t>(static_cast<int64_t>(site_live[site]) + delta);
    site_max[site] = std::max(site_max[site], site_live[site]);
  };
  for (size_t i = 0; i < tr.size(); ++i) {
    const auto& e = tr[i];
    const int64_t x = x_of(i);
    const auto change = t1.apply(e);
    if (t1.replaced)
      touch(sites.site(t1.replaced->stack), x, -static_cast<int64_t>(t1.replaced->size));
    if (change) {
      const auto size = static_cast<int64_t>(change->block.size);
      touch(sites.site(change->block.stack), x, change->added ? size : -size);
    }
    if (e.action == snap::Action::kAlloc) {
      d.allocations += 1;
      const int lg = e.size ? std::bit_width(e.size) - 1 : 0;
      auto& b = sizes[lg];
      b.log2 = lg;
      b.count += 1;
      b.bytes += e.size;
    } else if (e.action == snap::Action::kFreeCompleted) {
      d.frees += 1;
    } else if (e.action == snap::Action::kOom) {
      // A program retrying after OOMs can log thousands; the first ones tell the story.
      if (d.ooms.size() < opt.max_bands) d.ooms.push_back({x, e.size, e.device_free});
      d.oom_count += 1;
    }
    if (t1.live_bytes() > d.peak_bytes) {
      d.peak_bytes = t1.live_bytes();
      d.peak_x = x;
      peak_applied = i + 1;
    }
  }
  for (size_t i = 0; i < nsites; ++i) touch(static_cast<int>(i), d.x_end, 0);
  for (const auto& [lg, b] : sizes) d.sizes.push_back(b);

  // The series: the top sites by byte-time (by their own peak when nothing spans time).
  std::vector<int> ranked;
  for (size_t i = 0; i < nsites; ++i)
    if (site_max[i] > 0) ranked.push_back(static_cast<int>(i));
  std::sort(ranked.begin(), ranked.end(), [&](int a, int b) {
    if (site_area[a] != site_area[b]) return site_area[a] > site_area[b];
    if (site_max[a] != site_max[b]) return site_max[a] > site_max[b];
    return sites.labels[a] < sites.labels[b];
  });
  const size_t shown = ranked.size() <= opt.top_sites + 1 ? ranked.size() : opt.top_sites;
  std::vector<int> series_of_site(nsites, static_cast<int>(shown));
  for (size_t i = 0; i < shown; ++i) {
    series_of_site[ranked[i]] = static_cast<int>(i);
    d.series.push_back(sites.labels[ranked[i]]);
  }
  if (ranked.size() > shown) d.series.push_back("other");
  const size_t nseries = std::max<size_t>(d.series.size(), 1);

  // Pass 2: the downsampled timeline and the live sets at the peak and at exit.
  LiveTracker t2(initial);
  std::vector<uint64_t> series_live(nseries, 0);
  for (const auto& b : initial) series_live[series_of_site[sites.site(b.stack)]] += b.size;
  auto point = [&](int64_t x) {
    return TimelinePoint{x, t2.live_bytes(), t2.reserved_bytes(), series_live};
  };
  d.points.push_back(point(d.x_begin));
  if (peak_applied == 0) d.at_peak = make_table(t2.live(), sites, opt);
  const auto span = static_cast<double>(std::max<int64_t>(1, d.x_end - d.x_begin + 1));
  const size_t buckets = std::max<size_t>(1, opt.max_buckets);
  size_t bucket = SIZE_MAX;
  TimelinePoint best, last;
  bool have_best = false;
  // A bucket draws as its highest state from that moment to the bucket's end (so a spike shorter
  // than a pixel still shows), then its last state, which holds through any idle gap after it.
  auto flush = [&]() {
    if (!have_best) return;
    d.points.push_back(best);
    if (last.total != best.total || last.reserved != best.reserved) {
      const auto end = d.x_begin + static_cast<int64_t>(static_cast<double>(bucket + 1) * span /
                                                        static_cast<double>(buckets));
      last.x = std::clamp(end, best.x, d.x_end);
      d.points.push_back(last);
    }
    have_best = false;
  };
  for (size_t i = 0; i < tr.size(); ++i) {
    const int64_t x = x_of(i);
    const auto b = std::min(buckets - 1, static_cast<size_t>(static_cast<double>(x - d.x_begin) /
                                                             span * static_cast<double>(buckets)));
    if (b != bucket) {
      flush();
      bucket = b;
    }
    const auto change = t2.apply(tr[i]);
    if (t2.replaced)
      series_live[series_of_site[sites.site(t2.replaced->stack)]] -= t2.replaced->size;
    if (change) {
      auto& v = series_live[series_of_site[sites.site(change->block.stack)]];
      v = change->added ? v + change->block.size : v - change->block.size;
    }
    d.peak_reserved = std::max(d.peak_reserved, t2.reserved_bytes());
    if (!change && !t2.replaced && t2.reserved_bytes() == last.reserved && have_best) continue;
    last = point(x);
    if (!have_best || last.total > best.total) {
      best = last;
      have_best = true;
    }
    if (i + 1 == peak_applied) d.at_peak = make_table(t2.live(), sites, opt);
  }
  flush();
  d.at_exit = make_table(t2.live(), sites, opt);
  add_marks(d, s, devices, opt);
  return d;
}

}  // namespace

ReportModel build_report_model(const snap::Snapshot& s, const ReportOptions& opt) {
  const SiteIndex sites(s);
  ReportModel m;
  const auto list = devices_of(s);
  const std::set<int> devices(list.begin(), list.end());
  for (int device : list) m.devices.push_back(build_device(s, device, sites, devices, opt));
  std::set<int32_t> used;
  for (const auto& d : m.devices)
    for (const auto* table : {&d.at_peak, &d.at_exit})
      for (const auto& g : table->groups)
        for (const auto& st : g.stacks)
          if (st.stack >= 0 && static_cast<size_t>(st.stack) < s.stacks.size())
            used.insert(st.stack);
  for (int32_t id : used) {
    ReportStack rs{id, {}};
    for (const auto* f : visible_frames(s.stacks[id])) rs.frames.push_back(*f);
    m.stacks.push_back(std::move(rs));
  }
  return m;
}

}  // namespace cumemtrace::viz
