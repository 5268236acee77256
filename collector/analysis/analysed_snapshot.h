// Contract: one snapshot analysed once for one command (issue 55, item 5): the snapshot (its
// PyTorch blocks labelled by the reader: cli/snapshot_inputs.h read_snapshot_for_views runs
// pytorch/whatif.h label_block_sizes on every offline read) and one DeviceReplay per device
// (model.h: units, layers, the peaks of its Timeline), each built the first time a view asks for
// that device and kept for every later view of the same command. report, check, diff, the HTML
// page, the ledger, the by-module view and the OOM verdicts all read these replays, so a command
// replays each device of a snapshot once (DeviceReplay::built() counts them for the tests).
// The view refers to the snapshot, which must outlive it. It converts implicitly from a snapshot
// so that a caller holding only a snapshot (a test, a one-off view) still gets one view per call;
// the commands make one per snapshot and pass it down. One command's views run on one thread.
#pragma once

#include <map>
#include <memory>

#include "analysis/model.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

class AnalysedSnapshot {
 public:
  AnalysedSnapshot(const snap::Snapshot& s);  // NOLINT(google-explicit-constructor): see above
  AnalysedSnapshot(AnalysedSnapshot&&) = default;
  AnalysedSnapshot& operator=(AnalysedSnapshot&&) = default;
  ~AnalysedSnapshot();

  const snap::Snapshot& snapshot() const { return *s_; }
  // model.h device_count: the devices a replay can be asked for are 0 .. devices()-1.
  int devices() const { return devices_; }
  // The device's replay, built on first use (a device the snapshot lacks gets an empty one, as
  // DeviceReplay gives it).
  const DeviceReplay& replay(int device) const;

 private:
  const snap::Snapshot* s_;
  int devices_ = 0;
  mutable std::map<int, std::unique_ptr<DeviceReplay>> replays_;
};

}  // namespace cumemtrace::analysis
