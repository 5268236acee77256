// Contract: raw return addresses of the calling thread, innermost first, with cumemtrace's own
// frames removed. No allocation, no lock beyond what the platform unwinder takes. Symbolization
// is the collector's job; module_map.h tells it where each module was loaded.
#pragma once

#include <cstdint>

namespace cumemtrace::preload {

unsigned capture_stack(uint64_t* out, unsigned max_depth) noexcept;

}  // namespace cumemtrace::preload
