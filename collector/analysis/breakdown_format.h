// Contract: how a Breakdown (model.h: the layers of a device's memory at one moment) reads for
// people, written once so report, check, the HTML page's text and `run`'s summary line say it in
// the same words and numbers:
//   "reserved 218 MiB = allocated 198 MiB + cached 19.9 MiB free, largest free block 11.0 MiB"
//   "driver-visible 1.50 GiB = CUDA context 500 MiB + other untracked 12.0 MiB + other libraries
//   64.0 MiB + PyTorch reserved 218 MiB" (the context as measured at its creation; without such a
//   measurement "untracked 512 MiB (CUDA context not measured)" stands for the first two)
// Sizes are snap::format_bytes's, the one size rule.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "analysis/model.h"

namespace cumemtrace::analysis {

// Seconds since the origin (model.h time_origin), "+1.234567 s".
std::string format_time(int64_t time_us, int64_t origin_us);

// "1 allocation", "3 allocations".
std::string plural(uint64_t n, std::string_view one);

// What a live count is made of, for report, the summary line and the HTML page alike:
// "13 allocations", "11 PyTorch tensors" (all PyTorch's), or "13 allocations: 11 PyTorch tensors
// (65.0 MiB) and 2 driver allocations (128 MiB)": a PyTorch run's live set mixes the caching
// allocator's tensors with other libraries' memory, and its segments are counted elsewhere.
std::string live_count_text(const LiveCount& c);

// Which peak a breakdown of moment "peak" describes: "the reserved peak" in PyTorch's own files
// (where "live at the peak" is the allocated peak, another moment), else "the peak".
std::string_view layers_peak_name(const Breakdown& b);

// The PyTorch part; empty when the breakdown has no PyTorch data.
std::string pytorch_layers_text(const Breakdown& b);
// The driver part; empty without a driver-visible sample. Other libraries name at most
// `max_libraries` libraries, largest first.
std::string driver_layers_text(const Breakdown& b, size_t max_libraries = 3);

}  // namespace cumemtrace::analysis
