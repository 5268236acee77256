// Contract: the one allocation-site rule every view uses (report, check, diff, suppressions, the
// HTML report, Perfetto and folded stacks). A stack (innermost first) has frames that only say
// "memory was requested" — libcuda, libcudart, cumemtrace's hooks, PyTorch's caching allocator,
// tensor factories (at::native::empty*, at::detail::...), the stack capture itself, interpreter
// glue — listed once in frames.cpp. The allocation site of a stack is the innermost frame the user
// wrote:
//  1. the innermost Python frame of the user's own code: outside the Python standard library,
//     installed packages (site-packages, dist-packages) and PyTorch (is_library_python; the
//     paths are configurable, set_library_code). Its label names the library frame beside it, the
//     innermost Python frame (where the library made the request): "forward (train.py:76) via
//     Linear.forward (linear.py:134)"; on autograd's engine thread, whose stack is the node it
//     evaluates and then the frames of the thread that called backward (the preload lends them:
//     preload/stacks/backward_caller.h), the site is that backward() line and the node is the
//     library frame beside it: "step (train.py:42) via
//     torch::autograd::generated::AddmmBackward0::apply(...) (libtorch_cpu.so)";
//     Under a framework the user's innermost line is the trainer's entry (`trainer.train()`,
//     `trainer.fit(model)`: it calls a library function train, fit, evaluate, predict, validate
//     or test of a class Trainer, or of a file trainer.py before CPython 3.11), which says nothing
//     of where memory goes: then the innermost frame of the model's code (a library Python
//     frame whose path has a part of set_model_code, by default "/models/": transformers'
//     modeling_gpt2.py) stands as the site, with its own "via": "GPT2MLP.forward
//     (modeling_gpt2.py:NNN) via Linear.forward (linear.py:134)". When no such frame lies
//     inside the entry, the user's line stays;
//  2. else, when every Python frame is library code, the innermost Python frame;
//  3. else (no Python frame) the innermost frame that is not machinery, else (all machinery) the
//     innermost frame.
// Labels are "function (file:line)" with the file's base name and the C++ name folded
// (short_function_name): argument lists become "(...)", template arguments "<...>", as
// heaptrack_print does, so a PyTorch site never prints as a 1,000-character line. The full name
// (and full path) stays available: SiteTable(s, /*full_names=*/true), and JSON carries raw frames.
// SiteTable caches the answer per interned stack so no stack shared by many events is re-scanned.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

// True for frames that say how memory was obtained, not who wanted it (allocator, runtime, stack
// capture, interpreter and process start-up glue).
bool is_runtime_frame(const snap::Frame& f);

// Frames PyTorch's own viewer hides (stack capture, interpreter glue, dispatcher registration):
// never shown in stacks of the HTML report, Perfetto or folded output.
bool is_hidden_frame(const snap::Frame& f);

// Frames of a stack minus hidden ones; keeps the innermost frame when every frame is hidden, so
// no stack becomes empty.
std::vector<const snap::Frame*> visible_frames(const snap::Stack& s);

// Index into `s` of its site frame (the rule above); -1 for an empty stack.
int site_frame_index(const snap::Stack& s);

// Index into `s` of the library frame shown beside a user's site frame `site` (rule 1 above): an
// autograd node's frame inside the innermost Python frame, else that Python frame; -1 when the
// site is not the user's Python line or neither lies inside it.
int via_frame_index(const snap::Stack& s, int site);

// True for the frame of an autograd node's apply() ("torch::autograd::generated::MmBackward0::
// apply(...)", "torch::autograd::AccumulateGrad::apply(...)"): the frame the preload puts for the
// node an engine thread evaluates (preload/stacks/autograd_node.h).
bool is_autograd_node_frame(const snap::Frame& f);

// True for a Python frame: its file is a .py file (its name is Python's, never folded).
bool is_python_frame(const snap::Frame& f);

// True for a Python frame of library code (rule 1 above): a path under the interpreter's own
// directories (".../lib/python3.N/", site-packages included), in "site-packages/",
// "dist-packages/" or "/torch/", or matching a library pattern of set_library_code, unless it
// matches one of its user patterns.
bool is_library_python(const snap::Frame& f);

// The one setting of the rule, from --library-code (offline commands) or CUMEMTRACE_LIBRARY_CODE
// (every command; the option wins), set once at start: comma-separated path substrings that count
// as library code besides the defaults; one starting with '!' counts as the user's code even where
// a library rule matches ("!site-packages/mytrainer/"). Replaces the previous setting.
void set_library_code(const std::string& spec);

// The framework site's setting (rule 1), from --model-code (offline commands) or
// CUMEMTRACE_MODEL_CODE (every command; the option wins), set once at start: comma-separated
// path parts of library Python files that are a model's code (default "/models/"); no part ("" or
// ",") turns the framework site off, so the user's trainer line stays the site. Replaces the
// previous setting.
void set_model_code(const std::string& spec);

// "at::native::empty_strided_cuda(c10::ArrayRef<long>, ...)" ->
// "at::native::empty_strided_cuda(...)", "std::vector<int>::push_back(int const&)" ->
// "std::vector<...>::push_back(...)";
// "(anonymous namespace)", "operator()" and "operator<" keep their own brackets.
std::string short_function_name(const std::string& name);

// "function (file:line)", "function (file)" when line is 0, or "function" without a file. Short
// form: folded name and the file's base name; full form: both as recorded.
std::string format_frame(const snap::Frame& f, bool full = false);

inline constexpr const char* kNoStackSite = "(no stack recorded)";
inline constexpr const char* kBeforeTraceSite = "(allocated before the trace window)";

class SiteTable {
 public:
  explicit SiteTable(const snap::Snapshot& s, bool full_names = false);
  // Index into the stack of its site frame, -1 when the stack has no frames.
  int site_frame(int32_t stack) const;
  // The site label of a stack; kNoStackSite for kNoStack.
  const std::string& site(int32_t stack) const;
  // The library that asked for the memory: the base name of the file of the innermost native
  // frame outside the CUDA runtime and allocators (a shared library such as libcublasLt.so.12,
  // or a source file), else of the site frame's; "(unknown)" without one.
  std::string library(int32_t stack) const;
  // Frames of a stack from the site outwards (at most `max`), machinery skipped; all frames
  // from the innermost when the whole stack is machinery.
  std::vector<const snap::Frame*> program_frames(int32_t stack, size_t max) const;
  bool full_names() const { return full_; }
  const snap::Snapshot& snapshot() const { return s_; }

 private:
  const snap::Snapshot& s_;
  bool full_;
  std::vector<int> site_frame_;
  std::vector<std::string> label_;
  std::string no_stack_ = kNoStackSite;
};

// "at function (file:line)" for each program frame of `stack` (at most `max`), or a single
// "at (no stack recorded)" / before-trace line, for compiler-style output.
std::vector<std::string> stack_lines(const SiteTable& sites, int32_t stack, bool before_trace,
                                     size_t max);

}  // namespace cumemtrace::analysis
