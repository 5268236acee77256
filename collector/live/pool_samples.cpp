#include "live/pool_samples.h"

#include <algorithm>

#include "live/device_ledger.h"

namespace cumemtrace::collect {

void PoolSamples::on_pool_usage(const Record& r, int64_t t) {
  const auto& ev = r.ev;
  snap::PoolMemorySample m{t, sane_device(ev.device), ev.addr, ev.size, ev.aux};
  auto [it, first] = latest_.try_emplace(ev.addr, m);
  const bool changed = first || it->second.reserved_bytes != m.reserved_bytes;
  it->second = m;
  if (changed) {
    kept_.push_back(m);
    kept_at_[ev.addr] = t;
  }
}

void PoolSamples::write(snap::ToolSection& tool) const {
  tool.pool_memory = kept_;
  // Each pool's latest sample (the one at exit, at the end) even when its reserved bytes were
  // unchanged, so that the pool's state at the snapshot's moment is in the file.
  for (const auto& [pool, m] : latest_) {
    const auto kept = kept_at_.find(pool);
    if (kept == kept_at_.end() || kept->second != m.time_us) tool.pool_memory.push_back(m);
  }
  std::stable_sort(tool.pool_memory.begin(), tool.pool_memory.end(),
                   [](const auto& a, const auto& b) { return a.time_us < b.time_us; });
}

}  // namespace cumemtrace::collect
