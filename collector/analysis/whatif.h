// Contract: `cumemtrace whatif` — the recorded stream of PyTorch's allocator requests replayed
// through the model of its caching allocator (torch_allocator_model.h) under the configuration the
// run used and under others, per device. The stream is the PyTorch-sourced entries of a cumemtrace
// snapshot or every entry of PyTorch's own: `alloc` (the requested size; the model rounds it),
// `free_completed` (the block back in its pool; `free_requested` alone changes nothing, as a
// record_stream'd block stays unusable until its completion), `oom` (its size is already rounded)
// and the segment events, which are the model's answer, not its input, except where they show a
// call of empty_cache(): releases not made by a request's retry.
// The replay under the recorded configuration must give the recorded segment events exactly
// (action and size, between the same requests; addresses aside). Where it does not, or where the
// trace cannot be a complete stream (events dropped, a free of a tensor the trace never allocated,
// a torch the model does not cover, no PyTorch events), replay_whatif throws CannotReplay saying
// why, and no prediction is made.
// Every configuration is evaluated over the same window: the whole trace, or up to and including
// its first recorded OOM (what a program did after an OOM it survived depends on the OOM). A
// configuration under which a request fails stops there: the program would have raised.
// The budget: --budget SIZE (a device of that many bytes for PyTorch), else what the recording
// shows at its first OOM (PyTorch's reserved bytes then + the device's free bytes, or, where the
// device had room, the largest limit of set_per_process_memory_fraction that fails that request),
// else none (nothing runs out).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "analysis/frames.h"
#include "analysis/torch_allocator_model.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

class CannotReplay : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct FailingRequest {
  size_t entry = 0;        // index into the device's trace
  uint64_t requested = 0;  // bytes asked for
  uint64_t rounded = 0;    // as the allocator rounds it under this configuration
  int64_t time_us = 0;
  int32_t stack = snap::kNoStack;
  bool recorded_oom = false;  // the recorded run failed here too
};

struct WhatIfResult {
  std::string alloc_conf;  // the configuration ("" = PyTorch's defaults)
  bool recorded = false;   // the configuration the run used
  uint64_t reserved_peak_bytes = 0;
  int64_t reserved_peak_time_us = 0;
  uint64_t allocated_peak_bytes = 0;  // block sizes, as memory_allocated()
  uint64_t requested_peak_bytes = 0;  // bytes asked for: the same under every configuration
  uint64_t fragmentation_bytes = 0;   // reserved - allocated at the reserved peak
  double fragmentation_share = 0;     // of the reserved peak
  uint64_t segment_events = 0;        // segment_alloc/free/map/unmap the model made
  std::optional<FailingRequest> first_failing_request;
};

struct WhatIfDevice {
  int device = 0;
  std::string torch_version;  // as recorded ("" in PyTorch's own files)
  std::optional<torch_alloc::Budget> budget;
  std::string budget_source;             // how the budget was found, for people
  size_t requests = 0;                   // alloc + oom entries in the window
  uint64_t recorded_segment_events = 0;  // reproduced exactly under the recorded configuration
  size_t empty_cache_calls = 0;          // found in the recording
  std::optional<size_t> window_end;      // the first recorded OOM's entry, when there is one
  std::vector<WhatIfResult> results;     // the recorded configuration first, then each asked
};

struct WhatIfOptions {
  std::vector<std::string> alloc_confs;  // PyTorch's syntax, each checked by parse_alloc_conf
  std::optional<uint64_t> budget_bytes;  // --budget
};

// The configuration the snapshot says the run used: PyTorch's own `allocator_settings`
// (PYTORCH_CUDA_ALLOC_CONF and the parsed values), or cumemtrace's tool section (pytorch
// expandable_segments). Throws CannotReplay where it cannot be parsed.
torch_alloc::AllocatorConfig recorded_config(const snap::Snapshot& s);

// Every device with PyTorch allocator events. Throws CannotReplay (see above) or
// std::invalid_argument for an alloc_conf the model refuses (its message says why).
std::vector<WhatIfDevice> replay_whatif(const snap::Snapshot& s, const WhatIfOptions& o);

// For an OOM verdict: would the request of the oom entry `oom_entry` (an index into
// device_traces[device]) have succeeded under `alloc_conf`, replaying up to and including it?
struct OomWhatIf {
  std::string alloc_conf;
  bool would_succeed = false;
  uint64_t reserved_peak_bytes = 0;           // under alloc_conf, up to that request
  uint64_t recorded_reserved_peak_bytes = 0;  // the recorded configuration's, the same window
  std::optional<FailingRequest> first_failing_request;  // an earlier request may fail instead
};
// nullopt with `why` when the trace cannot be replayed or alloc_conf is refused.
std::optional<OomWhatIf> oom_whatif(const snap::Snapshot& s, int device, size_t oom_entry,
                                    const std::string& alloc_conf, std::string* why);

void print_whatif_text(const std::vector<WhatIfDevice>& r, const snap::Snapshot& s,
                       const SiteTable& sites, const std::string& file, std::ostream& out);
void print_whatif_json(const std::vector<WhatIfDevice>& r, const SiteTable& sites,
                       std::ostream& out);

}  // namespace cumemtrace::analysis
