// Contract: how viewers name where memory was allocated. A stack (innermost first) has frames
// that only say "the allocator ran" (stack capture, caching allocator, at::empty...) and frames
// PyTorch's own viewer hides (interpreter glue). `is_hidden_frame` says which; `visible_frames`
// drops them (keeping the innermost frame when all are hidden, so no stack becomes empty).
// `site_of` picks the frame that names an allocation site: the innermost Python frame when there
// is one (that is where a user reads their model), otherwise the innermost visible frame that is
// not allocator machinery. `frame_label` renders "name (file:line)" with C++ parameter lists cut,
// so labels stay short; the full text stays available through the stack itself.
#pragma once

#include <string>
#include <vector>

#include "snapshot.h"

namespace cumemtrace::viz {

bool is_hidden_frame(const snap::Frame& f);
bool is_allocator_frame(const snap::Frame& f);
std::vector<const snap::Frame*> visible_frames(const snap::Stack& s);

// nullptr when the stack is empty.
const snap::Frame* site_of(const snap::Stack& s);

// "forward (model.py:42)", "at::native::foo (Conv.cpp)", "main": file omitted when unknown.
std::string frame_label(const snap::Frame& f);
// Site label of a stack index (kNoStack or out of range: "<no stack>").
std::string site_label(const snap::Snapshot& s, int32_t stack);

// "at::(anonymous namespace)::create_out(c10::ArrayRef<long>)" -> "at::(anonymous
// namespace)::create_out"; leaves names without a parameter list alone.
std::string short_function_name(const std::string& name);

}  // namespace cumemtrace::viz
