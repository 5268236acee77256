// Contract: the user's marks of one traced process (kMark), as the snapshot's
// external_annotations in ring order: MARK, START (a push or a start/end range), END (a pop takes
// the name of the thread's innermost open push, an end the name of its range's start; an END
// that matches nothing is dropped). Their device is that of the marking thread's latest device
// event (note_device), 0 before it has one. The automatic phases' iteration mark (auto:step) is
// told to the owner once (take_step_mark).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "live/ring_reader.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

class Annotations {
 public:
  // A device event of thread tid (every one: repeats of the same thread and device are cheap).
  void note_device(uint32_t tid, int device);
  // True when the mark became an annotation.
  bool on_mark(const Record& r, int64_t t);
  bool take_step_mark();
  const std::vector<snap::Annotation>& annotations() const { return annotations_; }

 private:
  std::vector<snap::Annotation> annotations_;
  std::unordered_map<uint32_t, std::vector<std::string>> pushed_;  // tid -> open push names
  std::unordered_map<uint64_t, std::string> ranges_;               // start/end id -> name
  std::unordered_map<uint32_t, int> thread_device_;                // tid -> latest device
  uint32_t last_tid_ = 0;
  int last_device_ = -1;
  bool step_mark_ = false;
};

}  // namespace cumemtrace::collect
