// Contract: a named window of a run — the START..END annotation pair named NAME (cumemtrace marks,
// torch.cuda memory annotations, the pytest plugin's per-test ranges) — and what happened inside
// it, the same way for check (--range) and report (--range):
//  - the window is the LAST completed pair of that name (pairs nest like brackets: an END closes
//    the latest open START of its name), so a test that ran twice is judged on its last run;
//  - peak = the highest unit bytes (model.h) within the window, the state at START included;
//  - own peak = the window's own: the most bytes allocated within it (after START, at or before
//    END) that were live at one moment. What was live at START, and its freeing, do not count, so
//    a test's number is the same whatever ran before it (pytest-memray's rule); check --range
//    judges this one;
//  - leaked = allocations made within the window still live at END. Memory allocated before
//    START and freed inside the window is not a leak of it.
// Both count in a PyTorch user's terms (model.h Attributed): on a device whose PyTorch segments
// are split into tensors, its tensors and other libraries' allocations, never PyTorch's cache (a
// segment cached by one test and reused by the next is neither's).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "analysis/model.h"

namespace cumemtrace::analysis {

struct RangeWindow {
  std::string name;
  int64_t start_us = 0;
  int64_t end_us = 0;
  size_t completed = 0;  // completed pairs of that name (the window is the last)
};

// nullopt when no START..END pair of that name is complete; `why` then says what was found.
std::optional<RangeWindow> find_range(const snap::Snapshot& s, const std::string& name,
                                      std::string* why = nullptr);

struct RangeResult {
  int device = 0;
  uint64_t start_bytes = 0;  // live at START
  uint64_t end_bytes = 0;    // live at END
  Watermark peak;            // the highest unit bytes within the window, START's state included
  Watermark own;             // the window's own peak (its index: the entry after which it held)
  std::vector<Allocation> own_at_peak;  // allocated within the window, live at the own peak
  std::vector<Allocation> leaked;
  uint64_t leaked_bytes = 0;
};

RangeResult evaluate_range(const DeviceReplay& r, const RangeWindow& w);

// A memory layer's highest value on device `d` and when, over the run or within `window`:
// PyTorch's allocated or reserved bytes (model.h's layers; `index` the trace entry after which it
// held), or with `driver` the highest driver-visible (NVML) sample, the one in force when the
// window opened included. `check`'s --max-allocated/reserved/driver-peak and the process
// summary's measures of them.
Watermark layer_peak(const DeviceReplay& rp, const snap::Snapshot& s, int d, bool driver,
                     bool allocated, const std::optional<RangeWindow>& window = std::nullopt);

}  // namespace cumemtrace::analysis
