// Contract: the findings of one snapshot under `check`'s limits (check.h says what each limit
// means; limits.h lists them). check_snapshot appends to `r.findings`, in this order: an
// unreadable file's one "readable" failure (and nothing else), the "complete" verdict of a
// cumemtrace file, a "written-while-running" warning when the limits of a process's end are not
// judged here, then each limit given, in limits.h's order (one finding per device, or one for the
// snapshot when it could not be judged), then the anomalies as warnings. Suppressions that match
// count their hits and bytes in `rules`. Throws RangeNotFound (report.h) when --range names no
// completed pair of the snapshot. A readable snapshot of a process that never used CUDA gets one
// "cuda-used" finding instead of all the others (check.h): an error, not judged, unless
// `others_used_cuda` (another input of the same check did) or --allow-no-cuda make it a warning;
// so does a --range in which no device memory event happened (unless --allow-no-cuda): whether a
// window used CUDA is its own, like its numbers (range.h), whatever ran before it.
#pragma once

#include <vector>

#include "verdicts/findings.h"
#include "verdicts/limits.h"
#include "verdicts/suppressions.h"

namespace cumemtrace::analysis {

void check_snapshot(const LoadedSnapshot& ls, const CheckOptions& given,
                    const std::vector<Suppression>& rules, CheckResult& r,
                    bool others_used_cuda = false);

}  // namespace cumemtrace::analysis
