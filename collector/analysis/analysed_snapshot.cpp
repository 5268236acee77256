#include "analysis/analysed_snapshot.h"

namespace cumemtrace::analysis {

AnalysedSnapshot::AnalysedSnapshot(const snap::Snapshot& s) : s_(&s), devices_(device_count(s)) {}

AnalysedSnapshot::~AnalysedSnapshot() = default;

const DeviceReplay& AnalysedSnapshot::replay(int device) const {
  auto& p = replays_[device];
  if (!p) p = std::make_unique<DeviceReplay>(*s_, device);
  return *p;
}

}  // namespace cumemtrace::analysis
