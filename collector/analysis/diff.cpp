#include "analysis/diff.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/frames.h"
#include "analysis/grouping.h"
#include "analysis/model.h"
#include "snapshot/size_format.h"

namespace cumemtrace::analysis {

using snap::format_bytes;
using snap::format_signed_bytes;

namespace {

struct Side {
  std::vector<uint64_t> peak, live;
  std::map<std::pair<int, std::string>, std::array<uint64_t, 3>> sites;  // peak, live, count
};

Side measure(const snap::Snapshot& s) {
  Side side;
  const SiteTable sites(s);
  const int n = device_count(s);
  side.peak.resize(static_cast<size_t>(n));
  side.live.resize(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    DeviceReplay rp(s, d);
    side.peak[static_cast<size_t>(d)] = rp.timeline().peak_bytes;
    // PyTorch's memory by its tensors, its cache one row of its own (model.h Attributed).
    const Attributed at_peak = rp.attributed_after(rp.timeline().peak_index);
    for (const auto& st : by_site(at_peak.allocations, sites))
      side.sites[{d, st.site}][0] += st.bytes;
    if (at_peak.has_cache) side.sites[{d, kCachedFreeLabel}][0] += at_peak.cached_free;
  }
  for (const auto& a : live_at_exit(s)) {
    side.live[static_cast<size_t>(a.device)] += a.size;
    auto& e = side.sites[{a.device, site_label(a, sites)}];
    e[1] += a.size;
    e[2] += 1;
  }
  return side;
}

int64_t delta(uint64_t a, uint64_t b) {
  return wrap_sub(static_cast<int64_t>(b), static_cast<int64_t>(a));
}

uint64_t magnitude(int64_t v) {
  return v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
}

std::string change(uint64_t a, uint64_t b) {
  const int64_t d = delta(a, b);
  std::string pct;
  if (a) pct = fmt::format(" ({:+.1f}%)", 100.0 * static_cast<double>(d) / static_cast<double>(a));
  return fmt::format("{} -> {}  {}{}", format_bytes(a), format_bytes(b), format_signed_bytes(d),
                     pct);
}

}  // namespace

Diff diff_snapshots(const snap::Snapshot& base, const std::string& base_file,
                    const snap::Snapshot& now, const std::string& new_file) {
  Diff d;
  d.base_file = base_file;
  d.new_file = new_file;
  const Side a = measure(base), b = measure(now);
  const size_t n = std::max(a.peak.size(), b.peak.size());
  for (size_t i = 0; i < n; ++i) {
    DeviceDiff dd;
    dd.device = static_cast<int>(i);
    if (i < a.peak.size()) dd.base_peak = a.peak[i], dd.base_live = a.live[i];
    if (i < b.peak.size()) dd.new_peak = b.peak[i], dd.new_live = b.live[i];
    d.devices.push_back(dd);
  }
  std::map<std::pair<int, std::string>, SiteDiff> all;
  for (const auto& [k, v] : a.sites) {
    auto& s = all[k];
    s.device = k.first;
    s.site = k.second;
    s.base_peak = v[0];
    s.base_live = v[1];
    s.base_count = v[2];
  }
  for (const auto& [k, v] : b.sites) {
    auto& s = all[k];
    s.device = k.first;
    s.site = k.second;
    s.new_peak = v[0];
    s.new_live = v[1];
    s.new_count = v[2];
  }
  for (auto& [k, s] : all) {
    if (s.base_peak != s.new_peak || s.base_live != s.new_live) d.sites.push_back(std::move(s));
  }
  std::sort(d.sites.begin(), d.sites.end(), [](const SiteDiff& x, const SiteDiff& y) {
    const uint64_t mx =
        magnitude(delta(x.base_peak, x.new_peak)) + magnitude(delta(x.base_live, x.new_live));
    const uint64_t my =
        magnitude(delta(y.base_peak, y.new_peak)) + magnitude(delta(y.base_live, y.new_live));
    if (mx != my) return mx > my;
    if (x.device != y.device) return x.device < y.device;
    return x.site < y.site;
  });
  return d;
}

void print_diff_text(const Diff& d, size_t top, std::ostream& out) {
  out << fmt::format("cumemtrace diff: {} -> {}\n", d.base_file, d.new_file);
  for (const auto& dev : d.devices) {
    out << fmt::format("\nDevice {}\n", dev.device);
    out << fmt::format("  peak:         {}\n", change(dev.base_peak, dev.new_peak));
    out << fmt::format("  live at exit: {}\n", change(dev.base_live, dev.new_live));
  }
  out << "\nChanged allocation sites (bytes at the peak / live at exit):\n";
  if (d.sites.empty()) out << "  none\n";
  for (size_t i = 0; i < d.sites.size() && i < top; ++i) {
    const auto& s = d.sites[i];
    out << fmt::format("  device {}: {}\n", s.device, s.site);
    if (s.base_peak != s.new_peak)
      out << fmt::format("      at peak: {}\n", change(s.base_peak, s.new_peak));
    if (s.base_live != s.new_live)
      out << fmt::format("      at exit: {} ({} -> {} allocations)\n",
                         change(s.base_live, s.new_live), s.base_count, s.new_count);
  }
  if (d.sites.size() > top) out << fmt::format("  ... {} more sites\n", d.sites.size() - top);
}

void print_diff_json(const Diff& d, std::ostream& out) {
  using nlohmann::json;
  json devs = json::array();
  for (const auto& dev : d.devices) {
    devs.push_back({{"device", dev.device},
                    {"base_peak_bytes", dev.base_peak},
                    {"new_peak_bytes", dev.new_peak},
                    {"peak_change_bytes", delta(dev.base_peak, dev.new_peak)},
                    {"base_live_bytes", dev.base_live},
                    {"new_live_bytes", dev.new_live},
                    {"live_change_bytes", delta(dev.base_live, dev.new_live)}});
  }
  json sites = json::array();
  for (const auto& s : d.sites) {
    sites.push_back({{"device", s.device},
                     {"site", s.site},
                     {"base_peak_bytes", s.base_peak},
                     {"new_peak_bytes", s.new_peak},
                     {"peak_change_bytes", delta(s.base_peak, s.new_peak)},
                     {"base_live_bytes", s.base_live},
                     {"new_live_bytes", s.new_live},
                     {"live_change_bytes", delta(s.base_live, s.new_live)},
                     {"base_live_count", s.base_count},
                     {"new_live_count", s.new_count}});
  }
  json j = {{"base", d.base_file},
            {"new", d.new_file},
            {"devices", std::move(devs)},
            {"sites", std::move(sites)}};
  out << j.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
}

}  // namespace cumemtrace::analysis
