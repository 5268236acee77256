// Contract: the stream-ordered memory pools of one traced process as the preload sampled them
// (kPoolUsage), for the tool section's pool_memory: the samples where a pool's reserved bytes
// changed (its first one included), plus each pool's latest one, in time order.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "live/ring_reader.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

class PoolSamples {
 public:
  void on_pool_usage(const Record& r, int64_t t);
  void write(snap::ToolSection& tool) const;

 private:
  std::vector<snap::PoolMemorySample> kept_;                     // reserved bytes changed
  std::unordered_map<uint64_t, snap::PoolMemorySample> latest_;  // by pool handle
  std::unordered_map<uint64_t, int64_t> kept_at_;  // pool -> time of its last kept sample
};

}  // namespace cumemtrace::collect
