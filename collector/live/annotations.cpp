#include "live/annotations.h"

#include "live/device_ledger.h"
#include "pytorch/phases.h"

namespace cumemtrace::collect {

void Annotations::note_device(uint32_t tid, int device) {
  if (device >= 0 && (tid != last_tid_ || device != last_device_)) {
    last_tid_ = tid;
    last_device_ = device;
    thread_device_[tid] = sane_device(device);
  }
}

bool Annotations::on_mark(const Record& r, int64_t t) {
  const auto stage = static_cast<wire::MarkStage>(r.ev.aux & 0xff);
  const uint64_t range = r.ev.aux >> 8;
  snap::Annotation a;
  a.time_us = t;
  const auto d = thread_device_.find(r.ev.tid);
  a.device = d != thread_device_.end() ? d->second : 0;
  switch (stage) {
    case wire::MarkStage::kMark:
      a.stage = "MARK";
      a.name = r.text;
      break;
    case wire::MarkStage::kStart:
      a.stage = "START";
      a.name = r.text;
      if (range) {
        ranges_[range] = r.text;
      } else {
        pushed_[r.ev.tid].push_back(r.text);
      }
      break;
    case wire::MarkStage::kEnd: {
      a.stage = "END";
      if (range) {
        auto it = ranges_.find(range);
        if (it == ranges_.end()) return false;
        a.name = std::move(it->second);
        ranges_.erase(it);
      } else {
        auto it = pushed_.find(r.ev.tid);
        if (it == pushed_.end() || it->second.empty()) return false;
        a.name = std::move(it->second.back());
        it->second.pop_back();
      }
      break;
    }
    default:
      return false;
  }
  if (a.stage == "MARK" && a.name == analysis::kAutoStep) step_mark_ = true;
  annotations_.push_back(std::move(a));
  return true;
}

bool Annotations::take_step_mark() {
  const bool was = step_mark_;
  step_mark_ = false;
  return was;
}

}  // namespace cumemtrace::collect
