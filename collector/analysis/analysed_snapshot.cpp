#include "analysis/analysed_snapshot.h"

#include <utility>

namespace cumemtrace::analysis {

AnalysedSnapshot::AnalysedSnapshot(const snap::Snapshot& s) : s_(&s), devices_(device_count(s)) {}

AnalysedSnapshot::AnalysedSnapshot(std::shared_ptr<const snap::Snapshot> owned)
    : owned_(std::move(owned)), s_(owned_.get()), devices_(device_count(*s_)) {}

AnalysedSnapshot::~AnalysedSnapshot() = default;

const DeviceReplay& AnalysedSnapshot::replay(int device) const {
  auto& p = replays_[device];
  if (!p) p = std::make_unique<DeviceReplay>(*s_, device);
  return *p;
}

}  // namespace cumemtrace::analysis
