#include "analysis/frames.h"

#include <array>
#include <string_view>

#include <fmt/format.h>

namespace cumemtrace::analysis {

namespace {

// Substrings of a frame's file name or function name that mark allocator/runtime plumbing.
// Keep this the only list: report, check, diff and suppressions all agree through it.
constexpr std::array<std::string_view, 22> kRuntimeFramePatterns = {
    "libcuda.so",
    "libcudart",
    "libcumemtrace",
    "cumemtrace::",
    "preload/hooks_",
    "c10::cuda::CUDACachingAllocator",
    "c10::cuda::",
    "CUDACachingAllocator.cpp",
    "torch::unwind",
    "torch::CapturedTraceback",
    "torch::cuda::(anonymous namespace)::gather",
    "memory_snapshot.cpp",
    "c10::Storage",
    "c10::TensorImpl",
    "c10::intrusive_ptr",
    "at::detail::empty",
    "at::TensorBase::",
    "CUDAHooks",
    "cudaMalloc",
    "cuMemAlloc",
    "cuMemCreate",
    "libc10_cuda",
};

// Process and thread start-up frames, matched by exact function name: never anyone's site.
constexpr std::array<std::string_view, 6> kStartupFrames = {
    "_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "__clone", "clone3",
};

}  // namespace

bool is_runtime_frame(const snap::Frame& f) {
  for (std::string_view p : kStartupFrames) {
    if (f.name == p) return true;
  }
  for (std::string_view p : kRuntimeFramePatterns) {
    if (f.name.find(p) != std::string::npos || f.filename.find(p) != std::string::npos) return true;
  }
  return false;
}

std::string format_frame(const snap::Frame& f) {
  const std::string name = f.name.empty() ? "??" : f.name;
  if (f.filename.empty() || f.filename == "??") return name;
  if (f.line <= 0) return fmt::format("{} ({})", name, f.filename);
  return fmt::format("{} ({}:{})", name, f.filename, f.line);
}

SiteTable::SiteTable(const snap::Snapshot& s) : s_(s) {
  site_frame_.resize(s.stacks.size(), -1);
  label_.resize(s.stacks.size());
  for (size_t i = 0; i < s.stacks.size(); ++i) {
    const auto& st = s.stacks[i];
    int site = st.empty() ? -1 : 0;
    for (size_t j = 0; j < st.size(); ++j) {
      if (!is_runtime_frame(st[j])) {
        site = static_cast<int>(j);
        break;
      }
    }
    site_frame_[i] = site;
    label_[i] = site < 0 ? no_stack_ : format_frame(st[static_cast<size_t>(site)]);
  }
}

int SiteTable::site_frame(int32_t stack) const {
  if (stack < 0 || static_cast<size_t>(stack) >= site_frame_.size()) return -1;
  return site_frame_[static_cast<size_t>(stack)];
}

const std::string& SiteTable::site(int32_t stack) const {
  if (stack < 0 || static_cast<size_t>(stack) >= label_.size()) return no_stack_;
  return label_[static_cast<size_t>(stack)];
}

std::vector<const snap::Frame*> SiteTable::program_frames(int32_t stack, size_t max) const {
  std::vector<const snap::Frame*> out;
  int first = site_frame(stack);
  if (first < 0) return out;
  const auto& st = s_.stacks[static_cast<size_t>(stack)];
  const bool all_runtime = is_runtime_frame(st[static_cast<size_t>(first)]);
  for (size_t j = static_cast<size_t>(first); j < st.size() && out.size() < max; ++j) {
    if (all_runtime || !is_runtime_frame(st[j])) out.push_back(&st[j]);
  }
  return out;
}

std::vector<std::string> stack_lines(const SiteTable& sites, int32_t stack, bool before_trace,
                                     size_t max) {
  std::vector<std::string> out;
  for (const snap::Frame* f : sites.program_frames(stack, max))
    out.push_back("at " + format_frame(*f));
  if (out.empty())
    out.push_back(std::string("at ") + (before_trace ? kBeforeTraceSite : kNoStackSite));
  return out;
}

}  // namespace cumemtrace::analysis
