// Contract: a PyTorch training run that runs out of memory, as the collector writes it, for the
// OOM verdict's tests and the views that show it (report, the HTML's OOM card). The caller labels
// its categories (analysis::label_categories), as the collector does before writing. Header-only.
#pragma once

#include "support/torch_run_builder.h"

namespace cumemtrace::testing {

// A training run that runs out in the forward of its second step (automatic phases and ownership
// walks, so every tensor has a category): one 64 MiB segment; parameters 24 MiB (train.py:5);
// step 1 complete (an activation of 30 MiB at model.py:40 made in forward and freed in backward);
// in step 2's forward the activation again, then a 16 MiB request with 10 MiB free in the cache
// and none on the device: exhaustion, 6 MiB short.
inline snap::Snapshot training_oom_snapshot() {
  constexpr uint64_t MiB = 1 << 20;
  TorchRunBuilder b;
  const auto model = b.line("train.py", 5, "<module>");
  const auto layer = b.line("model.py", 40, "forward");
  const auto big = b.line("model.py", 44, "forward");
  b.segment(1, 0x100000000, 64 * MiB);
  b.alloc(10, 0x100000000, 24 * MiB, model);
  b.walk(20, snap::OwnerRole::kParameter, {{0x100000000, 24 * MiB}});
  b.phase(1010, 1100, "auto:forward");
  b.alloc(1020, 0x101800000, 30 * MiB, layer);
  b.phase(1110, 1200, "auto:backward");
  b.free(1150, 0x101800000, TorchRunBuilder::kAutogradTid);
  b.phase(1210, 1300, "auto:optimizer");
  b.mark(1300, "auto:step");
  b.start(2010, "auto:forward");
  b.alloc(2020, 0x101800000, 30 * MiB, layer);
  snap::Snapshot s = b.finish();
  snap::TraceEntry oom;
  oom.action = snap::Action::kOom;
  oom.size = 16 * MiB;
  oom.device_free = 0;
  oom.time_us = 2030;
  oom.stack = big;
  oom.tid = TorchRunBuilder::kMainTid;
  oom.source = snap::Source::kPytorch;
  s.device_traces[0].push_back(oom);
  s.tool->end_time_us = 2031;
  s.tool->reason = "oom";
  return s;
}

}  // namespace cumemtrace::testing
