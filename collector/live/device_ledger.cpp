#include "live/device_ledger.h"

#include <algorithm>

namespace cumemtrace::collect {

DeviceLedger::Device& DeviceLedger::at(int device) {
  const auto d = static_cast<size_t>(sane_device(device));
  if (devices_.size() <= d) devices_.resize(d + 1);
  return devices_[d];
}

uint64_t DeviceLedger::live(int device) const {
  const auto d = static_cast<size_t>(device);
  return device >= 0 && d < devices_.size() ? devices_[d].live : 0;
}

void DeviceLedger::grow(int device, uint64_t size, int64_t t, int32_t stack) {
  Device& s = at(device);
  s.live += size;
  s.allocations++;
  s.bytes_allocated += size;
  s.window_peak.raise(s.live, t);
  if (count_stack_bytes_) stack_bytes_[stack] += size;
  s.peak.raise(s.live, t);
}

void DeviceLedger::restore(int device, uint64_t size, int64_t t, int32_t stack) {
  grow(device, size, t, stack);
  Device& s = at(device);
  s.allocations--;
  s.frees--;
}

void DeviceLedger::shrink(int device, uint64_t size) {
  Device& s = at(device);
  s.bytes_freed += std::min(s.live, size);
  s.live -= std::min(s.live, size);
  s.frees++;
}

void DeviceLedger::graph_pool_reading(int device, uint64_t reserved) {
  Device& d = at(device);
  d.graph_reserved = reserved;
  d.graph_reserved_peak.raise(reserved, 0);
}

void DeviceLedger::reset_window_peaks() {
  for (auto& s : devices_) s.window_peak = {s.live, 0, -1};
}

uint64_t DeviceLedger::at_peak_bytes() const {
  uint64_t most = 0;
  for (const auto& s : devices_) {
    if (s.live == s.peak.bytes) most = std::max(most, s.peak.bytes);
  }
  return most;
}

std::unordered_map<int32_t, uint64_t> DeviceLedger::take_stack_bytes() {
  std::unordered_map<int32_t, uint64_t> out;
  out.swap(stack_bytes_);
  return out;
}

void DeviceLedger::write(std::vector<snap::DeviceSummary>& out) const {
  for (size_t d = 0; d < devices_.size(); ++d) {
    const auto& ds = devices_[d];
    out.push_back(snap::DeviceSummary{static_cast<int>(d), ds.peak.bytes, ds.peak.time_us, ds.live,
                                      ds.allocations, ds.frees, ds.graph_reserved,
                                      ds.graph_reserved_peak.bytes});
  }
}

}  // namespace cumemtrace::collect
