// Contract: the live gauges `run --metrics` serves (live/metrics_server.h), as Prometheus' text
// exposition format 0.0.4 or OpenMetrics 1.0 text, written from snapshots of the running processes
// (ProcessSession::snapshot) by the analysis engine every view uses (analysis/model.h's
// DeviceReplay: the layers at snapshot time, the peaks; its attributed tensors' categories,
// pytorch/categories.h; OOMs as pytorch/oom_verdict.h counts them; the rank from
// analysis/rank_identity.h), so a gauge equals the number `report` shows for the same file.
// Every series has the labels host, pid, exe (the program's file name) and, for a rank of a job,
// rank, with local_rank, node (the node's rank in the job) and job_id (its id: Prometheus keeps
// `job` for its own scrape job) where the launcher gave them (analysis/rank_identity.h): `run` over
// a launcher serves every rank of its node on one endpoint, and a fleet's Prometheus sums or picks
// by them. Per-device series add device. Names follow Prometheus' conventions (cumemtrace_ prefix,
// _bytes for sizes, _total for counters); one name per layer, so that a sum over a label means
// something (categories sum to the tensors and other libraries' allocations):
//   cumemtrace_tracked_bytes             every segment the collector knows (PyTorch's included)
//   cumemtrace_allocated_bytes           PyTorch's (or the stream-ordered pools') allocated
//   cumemtrace_reserved_bytes            PyTorch's (or the pools') reserved = allocated + cached
//   cumemtrace_cached_free_bytes         reserved - allocated
//   cumemtrace_largest_free_block_bytes  the largest inactive block in PyTorch's cache
//   cumemtrace_other_libraries_bytes     tracked - PyTorch reserved
//   cumemtrace_driver_visible_bytes      NVML's latest figure for the process on the device
//   cumemtrace_context_bytes             CUDA contexts in being, as measured at their creation
//   cumemtrace_other_untracked_bytes     driver-visible - tracked - context
//   cumemtrace_category_bytes{category}  live bytes by what they are for (parameter, ... library)
//   cumemtrace_{tracked,allocated,reserved,driver_visible}_peak_bytes   highest so far
//   cumemtrace_live_allocations          live allocations (PyTorch's tensors and driver ones)
//   cumemtrace_ooms_total                out-of-memory errors on the device
//   cumemtrace_events_total, cumemtrace_events_dropped_total   per process
// A layer the process does not have (no PyTorch, no NVML, no measured context) has no series;
// neither do the driver-visible layers while NVML's latest figure is below tracked + context
// (the engine's rule: that sample predates what the process holds now).
#pragma once

#include <string>
#include <vector>

#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

enum class MetricsFormat { kPrometheus, kOpenMetrics };

// The content type each format is served with.
const char* metrics_content_type(MetricsFormat f);

// The exposition text for these processes (cumemtrace snapshots; others are skipped).
std::string metrics_text(const std::vector<const snap::Snapshot*>& processes, MetricsFormat f);

}  // namespace cumemtrace::collect
