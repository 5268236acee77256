// Contract: writes a snapshot as a gzipped pprof profile (github.com/google/pprof,
// proto/profile.proto), what `go tool pprof`, Pyroscope and Parca read. Every number is the
// analysis engine's (analysis/model.h), the same bytes `cumemtrace report` shows:
//   alloc_objects/count, alloc_space/bytes   every request of the trace (model.h is_request), as
//                                            report's "top allocation sites";
//   inuse_objects/count, inuse_space/bytes   live when the snapshot was written (live_at_exit),
//                                            report's "live at exit"; the default sample type;
//   peak_inuse_objects/count, peak_inuse_space/bytes
//                                            live at each device's peak, PyTorch's memory by its
//                                            tensors and its cache one location of its own
//                                            (model.h Attributed), report's "live at the peak".
// `go tool pprof -sample_index=peak_inuse_space` picks one by name. A device's peak is its own
// moment, so peak samples of several devices add up to the sum of their peaks.
// Each sample's stack is the site rule's (analysis/frames.h SiteTable::program_frames): from the
// allocation site outwards, leaf first, the allocator and runtime frames inside it left out, so
// pprof's "flat" of a line is report's bytes of that site. Python and native frames are
// functions (name folded as report shows it, the recorded name as system_name) at their file
// and line; in cumemtrace's files a native frame named by its module only (no line information)
// is placed in a mapping of that module, and the first mapping is the traced program, so pprof
// names it (PyTorch's own files have no modules: no mappings). A sample without a
// stack is one location "(no stack recorded)" (or "(allocated before the trace window)").
// Labels: "device" ("cuda:N") and, where known, "category" (snapshot.h Category) and "module" (the
// innermost module call on the sample's stack: pytorch/modules.h stack_module).
#pragma once

#include <ostream>
#include <string>

#include "snapshot/snapshot.h"

namespace cumemtrace::viz {

// The profile's protobuf encoding, not compressed.
std::string pprof_profile(const snap::Snapshot& s);
// gzip of `data` (RFC 1952), as pprof files are stored; throws std::runtime_error on failure.
std::string gzip_bytes(const std::string& data);
// gzip(pprof_profile(s)) to `out`.
void write_pprof(const snap::Snapshot& s, std::ostream& out);

}  // namespace cumemtrace::viz
