#include "viz/allocation_site.h"

#include <array>
#include <string_view>

namespace cumemtrace::viz {

namespace {

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The lists MemoryViz.js's frameFilter hides, so both viewers show the same stacks. Its bare
// "_start" substring test would also hide user functions such as "on_start"; we match it exactly.
constexpr std::array<std::string_view, 7> kHiddenNameParts = {
    "unwind::unwind",  "CapturedTraceback::gather",
    "gather_with_cpp", "__libc_start_main",
    "PyEval_",         "PyObject_",
    "PyFunction_",
};
constexpr std::array<std::string_view, 10> kHiddenFileParts = {
    "core/boxing",
    "/Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
};

// Frames that only say "memory was requested": the caching allocator, tensor factories and
// dispatcher plumbing in PyTorch, the CUDA APIs and our own hooks in native programs.
constexpr std::array<std::string_view, 17> kAllocatorNamePrefixes = {
    "c10::",
    "at::detail::",
    "at::(anonymous namespace)::",
    "at::_ops::",
    "at::meta::",
    "at::empty",
    "at::native::empty",
    "torch::unwind",
    "torch::CapturedTraceback",
    "torch::cuda::",
    "cudaMalloc",
    "cuMemAlloc",
    "cuMemCreate",
    "cuMemMap",
    "cumemtrace::",
    "__cuda",
    "std::",
};
constexpr std::array<std::string_view, 4> kAllocatorFileParts = {
    "libcudart",
    "libcuda.so",
    "libcumemtrace",
    "CUDACachingAllocator",
};

}  // namespace

bool is_hidden_frame(const snap::Frame& f) {
  if (f.name == "_start") return true;
  for (auto p : kHiddenNameParts)
    if (contains(f.name, p)) return true;
  for (auto p : kHiddenFileParts)
    if (contains(f.filename, p)) return true;
  return false;
}

bool is_allocator_frame(const snap::Frame& f) {
  for (auto p : kAllocatorNamePrefixes)
    if (starts_with(f.name, p)) return true;
  for (auto p : kAllocatorFileParts)
    if (contains(f.filename, p)) return true;
  return false;
}

std::vector<const snap::Frame*> visible_frames(const snap::Stack& s) {
  std::vector<const snap::Frame*> out;
  for (const auto& f : s)
    if (!is_hidden_frame(f)) out.push_back(&f);
  if (out.empty() && !s.empty()) out.push_back(&s.front());
  return out;
}

const snap::Frame* site_of(const snap::Stack& s) {
  if (s.empty()) return nullptr;
  for (const auto& f : s)
    if (ends_with(f.filename, ".py")) return &f;
  for (const auto& f : s)
    if (!is_hidden_frame(f) && !is_allocator_frame(f)) return &f;
  for (const auto& f : s)
    if (!is_hidden_frame(f)) return &f;
  return &s.front();
}

std::string short_function_name(const std::string& name) {
  // The parameter list is the first '(' that does not open "(anonymous namespace)" and is not
  // inside template arguments; operator() and friends keep their own parentheses.
  int angle = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '<') {
      ++angle;
    } else if (c == '>') {
      if (angle > 0) --angle;
    } else if (c == '(' && angle == 0) {
      if (std::string_view(name).substr(i, 21) == "(anonymous namespace)") {
        i += 20;
        continue;
      }
      if (i >= 8 && std::string_view(name).substr(i - 8, 8) == "operator") {
        if (std::string_view(name).substr(i, 2) == "()") i += 1;
        continue;
      }
      if (i == 0) return name;
      return name.substr(0, i);
    }
  }
  return name;
}

std::string frame_label(const snap::Frame& f) {
  std::string out = short_function_name(f.name);
  if (out.empty()) out = "??";
  if (!f.filename.empty() && f.filename != "??") {
    const auto slash = f.filename.rfind('/');
    out += " (";
    out += slash == std::string::npos ? f.filename : f.filename.substr(slash + 1);
    if (f.line > 0) out += ":" + std::to_string(f.line);
    out += ")";
  }
  return out;
}

std::string site_label(const snap::Snapshot& s, int32_t stack) {
  if (stack < 0 || static_cast<size_t>(stack) >= s.stacks.size()) return "<no stack>";
  const snap::Frame* f = site_of(s.stacks[stack]);
  return f ? frame_label(*f) : "<no stack>";
}

}  // namespace cumemtrace::viz
