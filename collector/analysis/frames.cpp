#include "analysis/frames.h"

#include <array>
#include <string_view>

#include <fmt/format.h>

namespace cumemtrace::analysis {

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

// Substrings of a frame's file or function name that mark allocator/runtime plumbing.
constexpr std::array<std::string_view, 16> kRuntimeParts = {
    "libcuda.so",
    "libcudart",
    "libcumemtrace",
    "libc10_cuda",
    "cumemtrace::",
    "preload/hooks_",
    "CUDACachingAllocator",
    "memory_snapshot.cpp",
    "torch::unwind",
    "torch::CapturedTraceback",
    "CUDAHooks",
    "cudaMalloc",
    "cuMemAlloc",
    "cuMemCreate",
    "cuMemMap",
    "gather_with_cpp",
};

// Function-name prefixes of PyTorch's allocation plumbing: the caching allocator and storage
// (c10::), tensor factories and dispatcher glue (at::detail, at::empty*, at::native::empty*,
// at::_ops, generated Register*.cpp wrappers in anonymous namespaces), the CUDA runtime's
// internals, and the standard library (a std::vector's growth is its owner's allocation).
constexpr std::array<std::string_view, 13> kRuntimePrefixes = {
    "c10::",
    "at::detail::",
    "at::(anonymous namespace)::",
    "at::_ops::",
    "at::meta::",
    "at::empty",
    "at::native::empty",
    "at::TensorBase::",
    "torch::cuda::",
    "__cuda",
    "std::",
    "_Py",
    "Py",
};

// The lists PyTorch's MemoryViz.js frameFilter hides, so both viewers show the same stacks. Its
// bare "_start" substring test would also hide user functions such as "on_start"; we match it
// exactly.
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

// Process and thread start-up frames, matched by exact function name: never anyone's site.
constexpr std::array<std::string_view, 6> kStartupFrames = {
    "_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "__clone", "clone3",
};

std::string_view base_name(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

// Where Python's standard library and installed packages live ("/usr/lib/python3.11/",
// ".../lib64/python3.12/"): "/lib/python" or "/lib64/python" and a version digit.
bool in_python_lib_dir(std::string_view path) {
  for (std::string_view dir :
       {std::string_view("/lib/python"), std::string_view("/lib64/python")}) {
    for (size_t at = path.find(dir); at != std::string_view::npos; at = path.find(dir, at + 1)) {
      const size_t digit = at + dir.size();
      if (digit < path.size() && path[digit] >= '0' && path[digit] <= '9') return true;
    }
  }
  return false;
}

// The default library locations besides the interpreter's own directories: packages installed
// anywhere (virtual environments, --user, Debian's dist-packages) and PyTorch run from a source
// tree, and cumemtrace's own Python side in the target (lib/cumemtrace/python: its wrapper of
// init_process_group is on the stack of every allocation NCCL makes there, and is never the
// user's line). Matched as substrings of the frame's path.
constexpr std::array<std::string_view, 4> kLibraryParts = {
    "site-packages/",
    "dist-packages/",
    "/torch/",
    "/cumemtrace/python/",
};

// The --library-code / CUMEMTRACE_LIBRARY_CODE patterns (set_library_code): extra library paths,
// and ("!"-prefixed) the user's, which win over every library rule.
struct LibraryCode {
  std::vector<std::string> library, user;
};
LibraryCode& library_code() {
  static LibraryCode c;
  return c;
}

// The --model-code / CUMEMTRACE_MODEL_CODE path parts (set_model_code): where a framework's
// model files live. The default covers transformers (transformers/models/gpt2/modeling_gpt2.py),
// timm, diffusers and torchvision.
std::vector<std::string>& model_code() {
  static std::vector<std::string> parts = {"/models/"};
  return parts;
}

// A trainer's entry points, the user's one line under a framework (transformers' Trainer,
// Lightning's Trainer): CPython 3.11+ frames carry the qualified name; older ones the function's
// name alone, matched in a file named trainer.py.
constexpr std::array<std::string_view, 6> kTrainerEntries = {
    "train", "fit", "evaluate", "predict", "validate", "test",
};

bool is_trainer_entry(const snap::Frame& f) {
  if (!is_library_python(f)) return false;
  std::string_view name(f.name);
  const bool qualified = starts_with(name, "Trainer.");
  if (qualified) name.remove_prefix(8);
  if (!qualified && !ends_with(f.filename, "/trainer.py")) return false;
  for (std::string_view e : kTrainerEntries)
    if (name == e) return true;
  return false;
}

bool is_model_code(const snap::Frame& f) {
  if (!is_library_python(f)) return false;
  for (const auto& p : model_code())
    if (contains(f.filename, p)) return true;
  return false;
}

// Rule 1's framework site (frames.h): the innermost model-code frame when the user's line `user`
// calls a trainer's entry; -1 otherwise.
int framework_site(const snap::Stack& s, int user) {
  if (model_code().empty()) return -1;
  int callee = -1;
  for (int j = user - 1; j >= 0 && callee < 0; --j)
    if (is_python_frame(s[static_cast<size_t>(j)])) callee = j;
  if (callee < 0 || !is_trainer_entry(s[static_cast<size_t>(callee)])) return -1;
  for (int j = 0; j < callee; ++j)
    if (is_python_frame(s[static_cast<size_t>(j)]) && is_model_code(s[static_cast<size_t>(j)]))
      return j;
  return -1;
}

// Position just past the bracket that closes the one opened at `i` (same kind), or npos.
size_t matching(std::string_view s, size_t i, char open, char close) {
  int depth = 0;
  for (size_t j = i; j < s.size(); ++j) {
    if (s[j] == open) ++depth;
    if (s[j] == close && --depth == 0) return j + 1;
  }
  return std::string_view::npos;
}

}  // namespace

bool is_python_frame(const snap::Frame& f) {
  return ends_with(f.filename, ".py");
}

bool is_runtime_frame(const snap::Frame& f) {
  for (std::string_view p : kStartupFrames)
    if (f.name == p) return true;
  for (std::string_view p : kRuntimeParts)
    if (contains(f.name, p) || contains(f.filename, p)) return true;
  for (std::string_view p : kRuntimePrefixes)
    if (starts_with(f.name, p)) return true;
  return is_hidden_frame(f);
}

bool is_hidden_frame(const snap::Frame& f) {
  if (f.name == "_start") return true;
  for (auto p : kHiddenNameParts)
    if (contains(f.name, p)) return true;
  for (auto p : kHiddenFileParts)
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

void set_library_code(const std::string& spec) {
  LibraryCode c;
  for (size_t from = 0; from <= spec.size();) {
    size_t comma = spec.find(',', from);
    if (comma == std::string::npos) comma = spec.size();
    std::string_view p = std::string_view(spec).substr(from, comma - from);
    from = comma + 1;
    const bool user = !p.empty() && p.front() == '!';
    if (user) p.remove_prefix(1);
    if (!p.empty()) (user ? c.user : c.library).emplace_back(p);
  }
  library_code() = std::move(c);
}

bool is_library_python(const snap::Frame& f) {
  if (!is_python_frame(f)) return false;
  const std::string_view path(f.filename);
  for (const auto& p : library_code().user)
    if (contains(path, p)) return false;
  for (const auto& p : library_code().library)
    if (contains(path, p)) return true;
  for (std::string_view p : kLibraryParts)
    if (contains(path, p)) return true;
  return in_python_lib_dir(path);
}

bool is_autograd_node_frame(const snap::Frame& f) {
  if (is_python_frame(f) || !starts_with(f.name, "torch::autograd::")) return false;
  const std::string shown = short_function_name(f.name);
  return ends_with(shown, "::apply(...)") || ends_with(shown, "::apply()");
}

void set_model_code(const std::string& spec) {
  std::vector<std::string> parts;
  for (size_t from = 0; from <= spec.size();) {
    size_t comma = spec.find(',', from);
    if (comma == std::string::npos) comma = spec.size();
    if (comma > from) parts.push_back(spec.substr(from, comma - from));
    from = comma + 1;
  }
  model_code() = std::move(parts);
}

int via_frame_index(const snap::Stack& s, int site) {
  if (site <= 0) return -1;
  const auto& f = s[static_cast<size_t>(site)];
  if (is_library_python(f) && !is_model_code(f)) return -1;
  int node = -1;
  for (int j = 0; j < site; ++j) {
    const auto& f = s[static_cast<size_t>(j)];
    if (is_python_frame(f)) return node >= 0 ? node : j;
    if (node < 0 && is_autograd_node_frame(f)) node = j;
  }
  return node;
}

int site_frame_index(const snap::Stack& s) {
  if (s.empty()) return -1;
  for (size_t j = 0; j < s.size(); ++j) {
    if (is_python_frame(s[j]) && !is_library_python(s[j])) {
      const int model = framework_site(s, static_cast<int>(j));
      return model >= 0 ? model : static_cast<int>(j);
    }
  }
  for (size_t j = 0; j < s.size(); ++j)
    if (is_python_frame(s[j])) return static_cast<int>(j);
  for (size_t j = 0; j < s.size(); ++j)
    if (!is_runtime_frame(s[j])) return static_cast<int>(j);
  return 0;
}

std::string short_function_name(const std::string& name) {
  const std::string_view n(name);
  std::string out;
  out.reserve(n.size());
  // A leading '<' is a name such as "<lambda>" or "<module>", not template arguments.
  size_t i = n.substr(0, 1) == "<" ? n.find('>') : 0;
  if (i == std::string_view::npos) return name;
  if (i) out.append(n.substr(0, i));
  while (i < n.size()) {
    const char c = n[i];
    const bool after_operator = ends_with(out, "operator");
    if (c == '(' && n.substr(i, 21) == "(anonymous namespace)") {
      out.append("(anonymous namespace)");
      i += 21;
    } else if (after_operator && (c == '(' || c == '<' || c == '-' || c == '>')) {
      // operator(), operator<, operator<<, operator<=, operator->: the brackets are the name.
      size_t j = i;
      if (n.substr(i, 2) == "()") {
        j = i + 2;
      } else {
        while (j < n.size() && (n[j] == '<' || n[j] == '>' || n[j] == '=' || n[j] == '-')) ++j;
      }
      out.append(n.substr(i, j - i));
      i = j;
    } else if (c == '(' || c == '<') {
      const size_t end = matching(n, i, c, c == '(' ? ')' : '>');
      if (end == std::string_view::npos) {  // unbalanced: keep the rest as it is
        out.append(n.substr(i));
        break;
      }
      const bool empty = end == i + 2;
      out.append(c == '(' ? (empty ? "()" : "(...)") : (empty ? "<>" : "<...>"));
      i = end;
    } else {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

std::string format_frame(const snap::Frame& f, bool full) {
  // Python names ("<module>", "<lambda>") are short already and their brackets are the name.
  std::string name =
      f.name.empty() ? "??" : (full || is_python_frame(f) ? f.name : short_function_name(f.name));
  if (f.filename.empty() || f.filename == "??") return name;
  const std::string_view file = full ? std::string_view(f.filename) : base_name(f.filename);
  if (f.line <= 0) return fmt::format("{} ({})", name, file);
  return fmt::format("{} ({}:{})", name, file, f.line);
}

SiteTable::SiteTable(const snap::Snapshot& s, bool full_names) : s_(s), full_(full_names) {
  site_frame_.resize(s.stacks.size(), -1);
  label_.resize(s.stacks.size());
  for (size_t i = 0; i < s.stacks.size(); ++i) {
    const auto& st = s.stacks[i];
    const int site = site_frame_index(st);
    site_frame_[i] = site;
    if (site < 0) {
      label_[i] = no_stack_;
      continue;
    }
    label_[i] = format_frame(st[static_cast<size_t>(site)], full_names);
    if (const int via = via_frame_index(st, site); via >= 0)
      label_[i] += " via " + format_frame(st[static_cast<size_t>(via)], full_names);
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

std::string SiteTable::library(int32_t stack) const {
  const int j = site_frame(stack);
  if (j < 0) return "(unknown)";
  const auto& st = s_.stacks[static_cast<size_t>(stack)];
  // The innermost native frame of the program's code is the library that asked: a Python site
  // ("Linear.forward (linear.py:134)") names the line, not the library whose memory it is.
  for (const auto& f : st) {
    if (!is_python_frame(f) && !is_runtime_frame(f) && !f.filename.empty() && f.filename != "??") {
      return std::string(base_name(f.filename));
    }
  }
  const auto& f = st[static_cast<size_t>(j)];
  if (f.filename.empty() || f.filename == "??") return "(unknown)";
  return std::string(base_name(f.filename));
}

std::vector<const snap::Frame*> SiteTable::program_frames(int32_t stack, size_t max) const {
  std::vector<const snap::Frame*> out;
  const int first = site_frame(stack);
  if (first < 0) return out;
  const auto& st = s_.stacks[static_cast<size_t>(stack)];
  const bool all_runtime = is_runtime_frame(st[static_cast<size_t>(first)]);
  for (size_t j = static_cast<size_t>(first); j < st.size() && out.size() < max; ++j) {
    if (all_runtime ? !is_hidden_frame(st[j]) || j == static_cast<size_t>(first)
                    : !is_runtime_frame(st[j]))
      out.push_back(&st[j]);
  }
  return out;
}

std::vector<std::string> stack_lines(const SiteTable& sites, int32_t stack, bool before_trace,
                                     size_t max) {
  std::vector<std::string> out;
  for (const snap::Frame* f : sites.program_frames(stack, max)) {
    // Compiler-style lines keep the path as recorded (editors and CI annotations open it); the
    // name is folded unless full names were asked for.
    snap::Frame shown = *f;
    if (!sites.full_names() && !is_python_frame(shown))
      shown.name = short_function_name(shown.name);
    out.push_back("at " + format_frame(shown, true));
  }
  if (out.empty())
    out.push_back(std::string("at ") + (before_trace ? kBeforeTraceSite : kNoStackSite));
  return out;
}

}  // namespace cumemtrace::analysis
