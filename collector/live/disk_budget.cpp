#include "live/disk_budget.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace cumemtrace::collect {

namespace {

uint64_t file_bytes(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

bool droppable(WindowKind k) {
  return k != WindowKind::kExit && k != WindowKind::kSummary;
}

}  // namespace

const char* window_kind_name(WindowKind k) {
  switch (k) {
    case WindowKind::kRequest:
      return "request";
    case WindowKind::kPeriodic:
      return "periodic";
    case WindowKind::kGrowth:
      return "growth";
    case WindowKind::kPeak:
      return "peak";
    case WindowKind::kOom:
      return "oom";
    case WindowKind::kExit:
      return "exit";
    case WindowKind::kSummary:
      return "summary";
  }
  return "?";
}

void DiskBudget::unlink_as(size_t index, const std::string& why) {
  DiskFile f = kept_[index];
  kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(index));
  if (::unlink(f.path.c_str()) != 0) spdlog::warn("cannot remove {}", f.path);
  total_ -= std::min(total_, f.bytes);
  f.why = why;
  spdlog::debug("dropped {} ({} bytes): {}", f.path, f.bytes, why);
  dropped_.push_back(std::move(f));
}

// Drops the least telling window other than `keep` while the total plus `need` is over the cap;
// false when there is none left to drop.
bool DiskBudget::drop_one(const std::string& keep, uint64_t need) {
  if (total_ + need <= cap_) return false;
  size_t best = kept_.size();
  for (size_t i = 0; i < kept_.size(); ++i) {
    const DiskFile& f = kept_[i];
    if (!droppable(f.kind) || f.path == keep) continue;
    if (best == kept_.size() || f.kind < kept_[best].kind ||
        (f.kind == kept_[best].kind && f.seq < kept_[best].seq)) {
      best = i;
    }
  }
  if (best == kept_.size()) return false;
  unlink_as(best, "disk cap");
  return true;
}

void DiskBudget::make_room() {
  while (drop_one({}, largest_window_)) {
  }
}

void DiskBudget::add(const std::string& path, WindowKind kind, int pid) {
  const uint64_t bytes = file_bytes(path);
  bool found = false;
  for (auto& f : kept_) {
    if (f.path != path) continue;
    total_ = total_ - std::min(total_, f.bytes) + bytes;
    f.bytes = bytes;
    found = true;
  }
  if (!found) {
    kept_.push_back(DiskFile{path, kind, pid, bytes, ++seq_, {}});
    total_ += bytes;
  }
  if (kind != WindowKind::kSummary) largest_window_ = std::max(largest_window_, bytes);
  while (drop_one(path, 0)) {
  }
}

void DiskBudget::drop(const std::string& path, const std::string& why) {
  for (size_t i = 0; i < kept_.size(); ++i) {
    if (kept_[i].path == path) return unlink_as(i, why);
  }
}

}  // namespace cumemtrace::collect
