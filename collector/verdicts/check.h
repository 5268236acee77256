// Contract: `cumemtrace check` as a library, so `cumemtrace run` gates on exactly the same limits
// with exactly the same flags (cli/check_options.h registers them on a CLI11 command; sizes are
// parsed with snap::parse_bytes: "0", "12MiB", "1.5GB"); run_check evaluates them on
// already-loaded snapshots, prints the result in the chosen format to `out` (problems with the
// options' own files, e.g. an unreadable suppressions file, go to `err`) and returns the exit code:
// 0 every limit holds, 1 a limit failed (or a snapshot is incomplete: dropped events and no
// --allow-drops), 2 bad usage (check_options_problem) or an unreadable file (checked beside the
// others: LoadedSnapshot::unreadable). Over many files the text gives one verdict per file
// ("ok" / "FAILED") and one for the job; every line names the process's rank where it was a
// rank of a job (rank_identity.h: describe()). Limits:
//  - --max-leaked-bytes N: per device, bytes live at exit (model.h's live_at_exit) minus leak
//    suppressions must be <= N.
//  - --max-peak-bytes N: per device, the replayed peak must be <= N.
//  - --max-leaked-bytes on a PyTorch run with automatic phases counts the ledger's leaks instead
//    (ledger.h: tensors allocated after the warm-up that are not parameters, gradients or
//    optimizer state, and other libraries' memory allocated after it; never PyTorch's cache).
//  - --max-growth N [--mark NAME] [--warmup K]: per device, live bytes at the occurrences of mark
//    NAME (stage START or MARK) — without --mark, at the ends of the automatic steps (phases.h) —
//    after skipping the first K must not grow by more than N from the first counted occurrence to
//    the last; growth suppressions exclude matching allocations. Between automatic step ends a
//    PyTorch run's memory is its live tensors, each at the site that allocated it (the blame
//    --max-growth-per-step gives, never a segment's trigger), and other libraries'
//    allocations; PyTorch's cache is not growth. With a capped trace
//    (--max-trace-events) a mark older than the oldest kept entry cannot be measured: growth is
//    measured from the first kept one, and fails saying why when fewer than two are kept.
//  - --max-growth-per-step N: per device, the ledger's growth per step (ledger.h) must be <= N;
//    a snapshot without automatic steps, or with too few, cannot be judged and fails (a gate
//    that could not judge never passes). With --range, over the complete steps that end within
//    the window (a pytest test's).
//  - --max-module-bytes N [--module-depth D]: every module at depth D (report's by-module view,
//    modules.h: parameters, gradients and optimizer state at the end of the last complete step,
//    plus the activations its forward saved in that step) must hold <= N; the rows that are no
//    module ("(no module)", "(backward)") are not judged. A snapshot without module names, or a
//    --range (the view is the whole run's), cannot be judged and fails.
//  - --max-allocated-peak / --max-reserved-peak N: per device, the peak of PyTorch's allocated /
//    reserved bytes (model.h's layers); --max-driver-peak N: the highest driver-visible (NVML)
//    sample. A device without that data gets a warning, not a pass or a failure.
//  - --range NAME: every limit above is evaluated within the last START..END pair named NAME
//    (range.h): peaks within the window, leaked = allocated within it and live at its END. A
//    snapshot without a completed pair of that name is bad usage (exit 2).
// The list of limits (flags, Python names, what each needs) is verdicts/limits.h. A snapshot
// written while its process ran (periodic, on request, at an OOM) does not judge the limits of a
// process's end (leaked bytes, growth) outside --range: one warning says so, and they fail when
// no input was written at an end. `run` judges only the snapshots written at the end.
// Anomalies (double free, free of an unknown pointer...) are reported as warnings.
// A snapshot of a process that never used CUDA (snap::never_used_cuda) judges no limit: when no
// input used CUDA, each such file fails as not judged ("cuda-used"; --allow-no-cuda makes it a
// warning), so a gate never passes a run that could not touch the GPU; beside inputs that did,
// it is a warning (a launcher or helper process of a job). With --range the window's own
// events decide: a window in which no device memory event happened fails the same way, whatever
// the process did before it (a pytest test's verdict does not depend on the tests before it).
#pragma once

#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "snapshot/snapshot.h"
#include "verdicts/findings.h"
#include "verdicts/limits.h"

namespace cumemtrace::analysis {

// What is wrong with the options themselves, checked before any snapshot is read (and by `run`
// before the program starts): --mark without --max-growth, a suppressions file
// that cannot be read or does not parse, a --junit file that cannot be written (or would replace
// one of `inputs`, or an existing file without --force). One line, empty when all is well.
std::string check_options_problem(const CheckOptions& o, const std::vector<std::string>& inputs);

// Evaluates without printing; throws SuppressionError for a bad suppressions file and
// RangeNotFound (report.h) for a --range the snapshot lacks.
CheckResult evaluate_check(const std::vector<LoadedSnapshot>& snaps, const CheckOptions& o);

// `result`, when given, receives what was evaluated (for `run`, which names the rank of a file
// that failed).
int run_check(const std::vector<LoadedSnapshot>& snaps, const CheckOptions& o, std::ostream& out,
              std::ostream& err = std::cerr, CheckResult* result = nullptr);

void write_check_text(const CheckResult& r, std::ostream& out);
void write_check_json(const CheckResult& r, std::ostream& out);

}  // namespace cumemtrace::analysis
