// Contract: which frames of a stack belong to the program and which to the allocator/runtime
// plumbing, decided in one place (kRuntimeFramePatterns in frames.cpp). The allocation site of a
// stack is its innermost program frame, shown as "function (file:line)". SiteTable caches the
// answer per interned stack so the analysis never re-scans a stack shared by many events.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "snapshot.h"

namespace cumemtrace::analysis {

// True for frames of libcuda, libcudart, cumemtrace itself, PyTorch's caching allocator and
// unwinder, Python's C glue... — frames that say how memory was obtained, not who wanted it.
bool is_runtime_frame(const snap::Frame& f);

// "function (file:line)", "function (file)" when line is 0, or "function" without a file.
std::string format_frame(const snap::Frame& f);

inline constexpr const char* kNoStackSite = "(no stack recorded)";
inline constexpr const char* kBeforeTraceSite = "(allocated before the trace window)";

class SiteTable {
 public:
  explicit SiteTable(const snap::Snapshot& s);
  // Index into the stack of its site frame, -1 when the stack has no frames.
  int site_frame(int32_t stack) const;
  // The site label of a stack; kNoStackSite for kNoStack.
  const std::string& site(int32_t stack) const;
  // Program frames of a stack from the site outwards (at most `max`); all frames when the whole
  // stack is runtime frames.
  std::vector<const snap::Frame*> program_frames(int32_t stack, size_t max) const;
  const snap::Snapshot& snapshot() const { return s_; }

 private:
  const snap::Snapshot& s_;
  std::vector<int> site_frame_;
  std::vector<std::string> label_;
  std::string no_stack_ = kNoStackSite;
};

// "at function (file:line)" for each program frame of `stack` (at most `max`), or a single
// "at (no stack recorded)" / before-trace line, for compiler-style output.
std::vector<std::string> stack_lines(const SiteTable& sites, int32_t stack, bool before_trace,
                                     size_t max);

}  // namespace cumemtrace::analysis
