#include "analysis/grouping.h"

#include <algorithm>
#include <bit>
#include <unordered_map>

namespace cumemtrace::analysis {

namespace {

const std::string kBeforeTrace = kBeforeTraceSite;

void sort_sites(std::vector<SiteStat>& v, bool by_count) {
  std::sort(v.begin(), v.end(), [by_count](const SiteStat& a, const SiteStat& b) {
    if (by_count && a.count != b.count) return a.count > b.count;
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    if (a.count != b.count) return a.count > b.count;
    return a.site < b.site;
  });
}

}  // namespace

const std::string& site_label(const Allocation& a, const SiteTable& sites) {
  if (a.stack == snap::kNoStack && a.before_trace) return kBeforeTrace;
  return sites.site(a.stack);
}

std::vector<SiteStat> by_site(const std::vector<Allocation>& allocs, const SiteTable& sites) {
  std::unordered_map<std::string_view, size_t> index;
  std::vector<SiteStat> out;
  for (const auto& a : allocs) {
    const std::string& label = site_label(a, sites);
    auto [it, inserted] = index.emplace(label, out.size());
    if (inserted) out.push_back({label, 0, 0, a.stack});
    auto& st = out[it->second];
    ++st.count;
    st.bytes += a.size;
  }
  sort_sites(out, false);
  return out;
}

std::vector<StackGroup> by_stack(const std::vector<Allocation>& allocs) {
  std::unordered_map<int64_t, size_t> index;
  std::vector<StackGroup> out;
  for (const auto& a : allocs) {
    // Unknown-stack allocations from before the trace form their own group.
    const int64_t key = a.stack == snap::kNoStack && a.before_trace ? -2 : a.stack;
    auto [it, inserted] = index.emplace(key, out.size());
    if (inserted) out.push_back({a.stack, key == -2, 0, 0});
    ++out[it->second].count;
    out[it->second].bytes += a.size;
  }
  std::sort(out.begin(), out.end(), [](const StackGroup& a, const StackGroup& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    if (a.count != b.count) return a.count > b.count;
    return a.stack < b.stack;
  });
  return out;
}

std::vector<SiteStat> trace_alloc_sites(const snap::Snapshot& s, const SiteTable& sites,
                                        bool by_count) {
  // Aggregate per stack first (cheap integer keys), then fold stacks into sites.
  std::unordered_map<int32_t, std::pair<uint64_t, uint64_t>> per_stack;
  const Flavor f = flavor_of(s);
  for (const auto& tr : s.device_traces) {
    for (const auto& e : tr) {
      if (!is_request(f, e)) continue;
      auto& p = per_stack[e.stack];
      ++p.first;
      p.second += e.size;
    }
  }
  std::unordered_map<std::string_view, size_t> index;
  std::vector<SiteStat> out;
  for (const auto& [stack, cb] : per_stack) {
    const std::string& label = sites.site(stack);
    auto [it, inserted] = index.emplace(label, out.size());
    if (inserted) out.push_back({label, 0, 0, stack});
    out[it->second].count += cb.first;
    out[it->second].bytes += cb.second;
  }
  sort_sites(out, by_count);
  return out;
}

std::vector<SizeBucket> size_histogram(const snap::Snapshot& s) {
  std::vector<SizeBucket> b(65);
  for (size_t i = 0; i < b.size(); ++i) {
    b[i].low = i == 0 ? 0 : uint64_t{1} << (i - 1);
    b[i].high = i == 0 ? 1 : (i == 64 ? 0 : uint64_t{1} << i);
  }
  const Flavor f = flavor_of(s);
  for (const auto& tr : s.device_traces) {
    for (const auto& e : tr) {
      if (!is_request(f, e)) continue;
      const size_t i = e.size == 0 ? 0 : static_cast<size_t>(std::bit_width(e.size));
      ++b[i].count;
      b[i].bytes += e.size;
    }
  }
  std::vector<SizeBucket> out;
  for (const auto& x : b) {
    if (x.count) out.push_back(x);
  }
  return out;
}

uint64_t total_bytes(const std::vector<Allocation>& allocs) {
  uint64_t t = 0;
  for (const auto& a : allocs) t += a.size;
  return t;
}

}  // namespace cumemtrace::analysis
