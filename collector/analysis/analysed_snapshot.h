// Contract: one snapshot analysed once for one command (issue 55, item 5): the snapshot (its
// PyTorch blocks labelled by the reader: cli/snapshot_inputs.h read_snapshot_for_views runs
// pytorch/whatif.h label_block_sizes on every offline read) and one DeviceReplay per device
// (model.h: units, layers, the peaks of its Timeline), each built the first time a view asks for
// that device and kept for every later view of the same command. report, check, diff, the HTML
// page, the ledger, the by-module view and the OOM verdicts all read these replays, so a command
// replays each device of a snapshot once (DeviceReplay::built() counts them for the tests).
// Models a layer above derives from the whole snapshot (pytorch/phases.h's Phases: phases_of;
// pytorch/modules.h's TensorModules) are kept the same way, one of each type per view
// (derived<T>()), so that the ledger, the by-module view, the OOM verdicts, check's growth and the
// page read one of each.
// The view refers to the snapshot, which must outlive it, or owns it (a snapshot a command over
// many files read for one process: verdicts/job_oom.h SnapshotLoader). It converts implicitly from
// a snapshot so that a caller holding only a snapshot (a test, a one-off view) still gets one view
// per call; the commands make one per snapshot and pass it down. One command's views run on one
// thread.
#pragma once

#include <map>
#include <memory>
#include <typeindex>
#include <typeinfo>

#include "analysis/model.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

class AnalysedSnapshot {
 public:
  AnalysedSnapshot(const snap::Snapshot& s);  // NOLINT(google-explicit-constructor): see above
  explicit AnalysedSnapshot(std::shared_ptr<const snap::Snapshot> owned);
  AnalysedSnapshot(AnalysedSnapshot&&) = default;
  AnalysedSnapshot& operator=(AnalysedSnapshot&&) = default;
  ~AnalysedSnapshot();

  const snap::Snapshot& snapshot() const { return *s_; }
  // model.h device_count: the devices a replay can be asked for are 0 .. devices()-1.
  int devices() const { return devices_; }
  // The device's replay, built on first use (a device the snapshot lacks gets an empty one, as
  // DeviceReplay gives it).
  const DeviceReplay& replay(int device) const;

  // The model T made from the snapshot (T(const snap::Snapshot&)), built on first use and kept.
  template <typename T>
  const T& derived() const {
    auto& p = derived_[std::type_index(typeid(T))];
    if (!p) p = std::make_shared<const T>(*s_);
    return *static_cast<const T*>(p.get());
  }

 private:
  std::shared_ptr<const snap::Snapshot> owned_;  // null when the caller holds the snapshot
  const snap::Snapshot* s_;
  int devices_ = 0;
  mutable std::map<int, std::unique_ptr<DeviceReplay>> replays_;
  mutable std::map<std::type_index, std::shared_ptr<const void>> derived_;
};

}  // namespace cumemtrace::analysis
