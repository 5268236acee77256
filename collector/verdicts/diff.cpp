#include "verdicts/diff.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/breakdown_format.h"
#include "analysis/frames.h"
#include "analysis/grouping.h"
#include "analysis/model.h"
#include "analysis/rank_identity.h"
#include "pytorch/ledger.h"
#include "pytorch/modules.h"
#include "snapshot/size_format.h"

namespace cumemtrace::analysis {

using snap::format_bytes;
using snap::format_signed_bytes;

namespace {

struct Side {
  std::vector<uint64_t> peak, live;
  // Devices with memory or entries (report.h's rule: device_used), in model.h's pairing_order.
  std::vector<int> used;
  std::map<std::pair<int, std::string>, std::array<uint64_t, 3>> sites;  // peak, live, count
};

Side measure(const AnalysedSnapshot& view) {
  const snap::Snapshot& s = view.snapshot();
  Side side;
  const SiteTable sites(s);
  const int n = device_count(s);
  side.peak.resize(static_cast<size_t>(n));
  side.live.resize(static_cast<size_t>(n));
  std::vector<bool> has_live(static_cast<size_t>(n));
  for (const auto& a : live_at_exit(s)) {
    side.live[static_cast<size_t>(a.device)] += a.size;
    has_live[static_cast<size_t>(a.device)] = true;
    auto& e = side.sites[{a.device, site_label(a, sites)}];
    e[1] += a.size;
    e[2] += 1;
  }
  for (int d = 0; d < n; ++d) {
    const DeviceReplay& rp = view.replay(d);
    side.peak[static_cast<size_t>(d)] = rp.timeline().highest_known().bytes;
    if (device_used(rp.timeline(), has_live[static_cast<size_t>(d)])) side.used.push_back(d);
    // PyTorch's memory by its tensors, its cache one row of its own (model.h Attributed).
    const Attributed at_peak = rp.attributed_after(rp.timeline().trace.index);
    for (const auto& st : by_site(at_peak.allocations, sites))
      side.sites[{d, st.site}][0] += st.bytes;
    if (at_peak.has_cache) side.sites[{d, kCachedFreeLabel}][0] += at_peak.cached_free;
  }
  std::vector<std::pair<int, uint64_t>> used;
  for (int d : side.used) used.emplace_back(d, side.peak[static_cast<size_t>(d)]);
  side.used = pairing_order(std::move(used));
  return side;
}

// Each side's devices mapped onto the pairs compared (contract): device -> pair number.
struct Pairing {
  std::map<int, int> base, now;
  std::vector<DeviceDiff> pairs;
};

Pairing pair_devices(const snap::Snapshot& base, const Side& a, const snap::Snapshot& now,
                     const Side& b) {
  Pairing p;
  const RankIdentity ra = rank_identity(base), rb = rank_identity(now);
  const bool ranks = ra.known() && rb.known();
  const bool own = ranks || (a.used.size() == 1 && b.used.size() == 1);
  if (own && (ranks || a.used != b.used)) {
    const size_t n = std::max(a.used.size(), b.used.size());
    for (size_t k = 0; k < n; ++k) {
      DeviceDiff dd;
      dd.device = static_cast<int>(k);
      dd.base_device = k < a.used.size() ? a.used[k] : -1;
      dd.new_device = k < b.used.size() ? b.used[k] : -1;
      auto side = [&](const RankIdentity& id, int device) {
        const std::string dev = device >= 0 ? fmt::format("cuda:{}", device) : "(no device)";
        return id.known() ? fmt::format("rank {} {}", id.rank, dev) : dev;
      };
      dd.label = fmt::format("{} vs {}", side(ra, dd.base_device), side(rb, dd.new_device));
      if (dd.base_device >= 0) p.base[dd.base_device] = dd.device;
      if (dd.new_device >= 0) p.now[dd.new_device] = dd.device;
      p.pairs.push_back(dd);
    }
    return p;
  }
  const size_t n = std::max(a.peak.size(), b.peak.size());
  for (size_t i = 0; i < n; ++i) {
    DeviceDiff dd;
    dd.device = dd.base_device = dd.new_device = static_cast<int>(i);
    p.base[dd.device] = p.now[dd.device] = dd.device;
    p.pairs.push_back(dd);
  }
  return p;
}

// The pair a side's device belongs to; devices outside every pair get numbers after them.
int pair_of(const std::map<int, int>& m, int device, size_t pairs) {
  auto it = m.find(device);
  return it != m.end() ? it->second : static_cast<int>(pairs) + device;
}

int64_t delta(uint64_t a, uint64_t b) {
  return wrap_sub(static_cast<int64_t>(b), static_cast<int64_t>(a));
}

uint64_t abs_delta(int64_t v) {
  return v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
}

std::string change(uint64_t a, uint64_t b) {
  const int64_t d = delta(a, b);
  std::string pct;
  if (a) pct = fmt::format(" ({:+.1f}%)", 100.0 * static_cast<double>(d) / static_cast<double>(a));
  return fmt::format("{} -> {}  {}{}", format_bytes(a), format_bytes(b), format_signed_bytes(d),
                     pct);
}

std::string change_signed(int64_t a, int64_t b) {
  return fmt::format("{} -> {}  {}", format_signed_bytes(a), format_signed_bytes(b),
                     format_signed_bytes(wrap_sub(b, a)));
}

// A ledger's numbers by (device, name), in the order they come.
struct LedgerValues {
  std::vector<std::pair<std::pair<int, std::string>, int64_t>> peaks, phases, categories;
};

LedgerValues ledger_values(const Ledger& l, const std::map<int, int>& pair, size_t pairs) {
  LedgerValues v;
  for (DeviceLedger d : l.devices) {
    d.device = pair_of(pair, d.device, pairs);
    v.peaks.push_back(
        {{d.device, "allocated peak"}, static_cast<int64_t>(d.allocated_peak.allocated)});
    v.peaks.push_back(
        {{d.device, "reserved peak"}, static_cast<int64_t>(d.reserved_peak.reserved)});
    std::map<std::string, int> seen;
    for (const auto& p : d.steady_step ? d.steady : d.first) {
      std::string name = phase_label(p);
      if (const int n = ++seen[name]; n > 1) name += fmt::format(" ({})", n);
      v.phases.push_back({{d.device, name},
                          wrap_sub(static_cast<int64_t>(p.allocated_after),
                                   static_cast<int64_t>(p.allocated_before))});
    }
    for (const auto* m : {&d.allocated_peak, &d.reserved_peak})
      for (const auto& c : m->by_category)
        v.categories.push_back(
            {{d.device, fmt::format("{}: {}", m->moment, category_label(c.category))}, c.bytes});
  }
  return v;
}

// Pairs both sides' values by (device, name): the base's order, then names only the new has.
std::vector<ValueDiff> pair_values(
    const std::vector<std::pair<std::pair<int, std::string>, int64_t>>& a,
    const std::vector<std::pair<std::pair<int, std::string>, int64_t>>& b) {
  std::vector<ValueDiff> out;
  std::map<std::pair<int, std::string>, size_t> at;
  for (const auto& [k, v] : a) {
    at[k] = out.size();
    out.push_back({k.first, k.second, v, 0});
  }
  for (const auto& [k, v] : b) {
    auto it = at.find(k);
    if (it != at.end()) {
      out[it->second].now = v;
    } else {
      at[k] = out.size();
      out.push_back({k.first, k.second, 0, v});
    }
  }
  return out;
}

}  // namespace

Diff diff_snapshots(const AnalysedSnapshot& base_view, const std::string& base_file,
                    const AnalysedSnapshot& new_view, const std::string& new_file,
                    int module_depth) {
  const snap::Snapshot& base = base_view.snapshot();
  const snap::Snapshot& now = new_view.snapshot();
  Diff d;
  d.base_file = base_file;
  d.new_file = new_file;
  const Side a = measure(base_view), b = measure(new_view);
  const Pairing pairing = pair_devices(base, a, now, b);
  const size_t np = pairing.pairs.size();
  for (DeviceDiff dd : pairing.pairs) {
    const auto ba = static_cast<size_t>(dd.base_device), nb = static_cast<size_t>(dd.new_device);
    if (dd.base_device >= 0 && ba < a.peak.size())
      dd.base_peak = a.peak[ba], dd.base_live = a.live[ba];
    if (dd.new_device >= 0 && nb < b.peak.size())
      dd.new_peak = b.peak[nb], dd.new_live = b.live[nb];
    d.devices.push_back(dd);
  }
  std::map<std::pair<int, std::string>, SiteDiff> all;
  for (const auto& [dk, v] : a.sites) {
    const std::pair<int, std::string> k{pair_of(pairing.base, dk.first, np), dk.second};
    auto& s = all[k];
    s.device = k.first;
    s.site = k.second;
    s.base_peak = v[0];
    s.base_live = v[1];
    s.base_count = v[2];
  }
  for (const auto& [dk, v] : b.sites) {
    const std::pair<int, std::string> k{pair_of(pairing.now, dk.first, np), dk.second};
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
        abs_delta(delta(x.base_peak, x.new_peak)) + abs_delta(delta(x.base_live, x.new_live));
    const uint64_t my =
        abs_delta(delta(y.base_peak, y.new_peak)) + abs_delta(delta(y.base_live, y.new_live));
    if (mx != my) return mx > my;
    if (x.device != y.device) return x.device < y.device;
    return x.site < y.site;
  });

  const SiteTable base_sites(base), new_sites(now);
  const auto la = build_ledger(base_view, base_sites, module_depth);
  const auto lb = build_ledger(new_view, new_sites, module_depth);
  if (la && lb) {
    d.ledgers = true;
    const auto va = ledger_values(*la, pairing.base, np), vb = ledger_values(*lb, pairing.now, np);
    d.pytorch_peaks = pair_values(va.peaks, vb.peaks);
    d.phases = pair_values(va.phases, vb.phases);
    d.categories = pair_values(va.categories, vb.categories);
  } else if (la || lb) {
    d.ledger_note = fmt::format(
        "only {} is a PyTorch run with automatic phases: no comparison by phase or category",
        la ? base_file : new_file);
  }
  const auto ma = build_module_view(base_view, module_depth),
             mb = build_module_view(new_view, module_depth);
  if (ma && mb) {
    auto values = [](const ModuleView& v) {
      std::vector<std::pair<std::pair<int, std::string>, int64_t>> out;
      for (const auto& r : v.rows) {
        for (const auto& [what, bytes] :
             {std::pair<const char*, uint64_t>{"parameters", r.parameters},
              {"gradients", r.gradients},
              {"optimizer state", r.optimizer_state},
              {"activations", r.activations},
              {"forward peak", r.forward_peak},
              {"backward peak", r.backward_peak}}) {
          out.push_back({{-1, fmt::format("{}: {}", r.module, what)}, static_cast<int64_t>(bytes)});
        }
      }
      return out;
    };
    d.modules = pair_values(values(*ma), values(*mb));
  }
  return d;
}

namespace {

// "device 1", or the pair's own label ("rank 0 cuda:0 vs rank 1 cuda:1").
std::string pair_label(const Diff& d, int device) {
  for (const auto& dev : d.devices)
    if (dev.device == device && !dev.label.empty()) return dev.label;
  return fmt::format("device {}", device);
}

}  // namespace

bool no_differences(const Diff& d) {
  auto same = [](const std::vector<ValueDiff>& vs) {
    return std::all_of(vs.begin(), vs.end(), [](const ValueDiff& v) { return v.base == v.now; });
  };
  return d.sites.empty() && same(d.pytorch_peaks) && same(d.phases) && same(d.categories) &&
         std::all_of(d.devices.begin(), d.devices.end(), [](const DeviceDiff& v) {
           return v.base_peak == v.new_peak && v.base_live == v.new_live;
         });
}

void print_diff_text(const Diff& d, size_t top, std::ostream& out) {
  out << fmt::format("cumemtrace diff: {} -> {}\n", d.base_file, d.new_file);
  if (no_differences(d)) {
    out << fmt::format(
        "no differences: the same peak and bytes live at exit on {}, the same "
        "allocation sites{}\n",
        plural(d.devices.size(), "device"),
        d.ledgers ? ", the same PyTorch peaks, phases and categories" : "");
    return;
  }
  for (const auto& dev : d.devices) {
    out << (dev.label.empty() ? fmt::format("\nDevice {}\n", dev.device)
                              : fmt::format("\n{}\n", dev.label));
    out << fmt::format("  peak:         {}\n", change(dev.base_peak, dev.new_peak));
    out << fmt::format("  live at exit: {}\n", change(dev.base_live, dev.new_live));
  }
  out << "\nChanged allocation sites (bytes at the peak / live at exit):\n";
  if (d.sites.empty()) out << "  none\n";
  for (size_t i = 0; i < d.sites.size() && i < top; ++i) {
    const auto& s = d.sites[i];
    out << fmt::format("  {}: {}\n", pair_label(d, s.device), s.site);
    if (s.base_peak != s.new_peak)
      out << fmt::format("      at peak: {}\n", change(s.base_peak, s.new_peak));
    if (s.base_live != s.new_live)
      out << fmt::format("      at exit: {} ({} -> {} allocations)\n",
                         change(s.base_live, s.new_live), s.base_count, s.new_count);
  }
  if (d.sites.size() > top) out << fmt::format("  ... {} more sites\n", d.sites.size() - top);
  if (!d.ledger_note.empty()) out << fmt::format("\nPyTorch: {}\n", d.ledger_note);
  if (!d.ledgers) return;
  // Each list names the values that changed.
  auto list = [&](const char* title, const std::vector<ValueDiff>& vs, bool is_signed) {
    out << title;
    size_t shown = 0;
    for (const auto& v : vs) {
      if (v.base == v.now) continue;
      ++shown;
      out << fmt::format("  {} {}: {}\n", pair_label(d, v.device), v.name,
                         is_signed
                             ? change_signed(v.base, v.now)
                             : change(static_cast<uint64_t>(v.base), static_cast<uint64_t>(v.now)));
    }
    if (!shown) out << "  no change\n";
  };
  list("\nPyTorch peaks:\n", d.pytorch_peaks, false);
  list("\nPyTorch, added per phase of the steady step:\n", d.phases, true);
  list("\nPyTorch, by category at the peaks:\n", d.categories, false);
  if (d.modules.empty()) return;
  out << "\nPyTorch, by module (what changed):\n";
  size_t changed = 0;
  for (const auto& v : d.modules) {
    if (v.base == v.now) continue;
    if (changed++ == top) {
      out << "  ... more (--top)\n";
      break;
    }
    out << fmt::format("  {}: {}\n", v.name,
                       change(static_cast<uint64_t>(v.base), static_cast<uint64_t>(v.now)));
  }
  if (changed == 0) out << "  none\n";
}

void print_diff_json(const Diff& d, std::ostream& out) {
  using nlohmann::json;
  json devs = json::array();
  for (const auto& dev : d.devices) {
    devs.push_back({{"device", dev.device},
                    {"base_device", dev.base_device},
                    {"new_device", dev.new_device},
                    {"label", pair_label(d, dev.device)},
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
  json j = {{"differences", !no_differences(d)},
            {"base", d.base_file},
            {"new", d.new_file},
            {"devices", std::move(devs)},
            {"sites", std::move(sites)}};
  auto values = [](const std::vector<ValueDiff>& v) {
    json a = json::array();
    for (const auto& x : v)
      a.push_back({{"device", x.device},
                   {"name", x.name},
                   {"base_bytes", x.base},
                   {"new_bytes", x.now},
                   {"change_bytes", wrap_sub(x.now, x.base)}});
    return a;
  };
  j["pytorch"] = d.ledgers ? json{{"peaks", values(d.pytorch_peaks)},
                                  {"phases", values(d.phases)},
                                  {"categories", values(d.categories)}}
                           : json(nullptr);
  if (!d.ledger_note.empty()) j["pytorch_note"] = d.ledger_note;
  j["modules"] = d.modules.empty() ? json(nullptr) : values(d.modules);
  out << j.dump(2, ' ', false, json::error_handler_t::replace) << '\n';
}

}  // namespace cumemtrace::analysis
