// Contract: the one list of `check`'s limits. Everything that names or enumerates limits reads
// this table: the flags `check` and `run` register (cli/check_options.cpp), `run`'s "were limits
// given" and the names it prints, "--junit/--verdict-file need a limit", the machine-readable
// list `cumemtrace check --list-limits --format json` prints (what the Python API and the pytest
// plugin take their limits from), and docs/check.md's table (a test compares it with the list).
// Adding a limit is one row here plus its evaluation in check_snapshot.cpp.
//
// Why the peaks and growth are judged as they are (docs/check.md): a peak is a height the run did
// reach, which the rest of the run can only raise, so any snapshot judges it, even one written
// while the process ran (at_end false); within a --range it is the window's own peak (what the
// window allocated and held at once, never what was live at its START), so a pytest test's number
// does not depend on the tests before it. Growth is measured between moments of the same state
// (the occurrences of --mark after the warm-up, or the ends of the automatic steps), never as
// what is held at exit, because a caching allocator keeps memory on purpose and what keeps
// growing step after step is the leak; its last moment is the run's end (at_end true), and a
// moment older than a capped trace's oldest entry cannot be measured.
//
// Each row: `name` (the Python keyword and the list's key: "max_leaked_bytes"), `flag`
// ("--max-leaked-bytes"), the CheckOptions member it fills, the name of its findings in the
// verdict (`check`: "leaked-bytes"), the flag's help, `needs` (what a
// snapshot must hold for the limit to be judged), and `at_end`: the limit speaks of a process's
// end (what is still held, growth over the run), so a snapshot written while the process ran
// (periodic, on request, at an out-of-memory error: mid_run_snapshot) does not judge it, except
// within a completed --range, whose END is an end; `run`'s gate only judges the snapshots written
// at the end, so `check` on every file of a run's directory agrees with it.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

// What `check` (and `run`) was asked: the limits (one member per row of the table below, which
// names it) and how to judge and print them (check.h says what each one means).
struct CheckOptions {
  std::optional<uint64_t> max_leaked_bytes;
  std::optional<uint64_t> max_peak_bytes;
  std::optional<uint64_t> max_allocated_peak;  // PyTorch allocated
  std::optional<uint64_t> max_reserved_peak;   // PyTorch reserved
  std::optional<uint64_t> max_driver_peak;     // driver-visible (NVML)
  std::string range;                           // evaluate within this annotation pair
  std::optional<uint64_t> max_growth;
  std::optional<uint64_t> max_growth_per_step;  // the ledger's growth per step (ledger.h)
  std::optional<uint64_t> max_module_bytes;     // a module's row of the by-module view
  int module_depth = 2;                         // the rows' depth (modules.h)
  std::string mark;
  int warmup = 1;
  bool allow_drops = false;
  bool allow_no_cuda = false;   // inputs that never used CUDA pass (with a warning)
  std::string suppressions;     // path; empty = none
  std::string junit;            // path; empty = none
  bool force = false;           // --junit may replace an existing file
  std::string format = "text";  // text | json | github
  size_t frames = 8;            // program frames shown per stack
  size_t stacks = 10;           // stacks shown per failure
};

struct LimitSpec {
  std::string_view name;
  std::string_view flag;
  std::optional<uint64_t> CheckOptions::*member;
  std::string_view check;  // the verdict's check name ("leaked-bytes"): findings.h Finding::check
  std::string_view help;
  std::string_view needs;
  bool at_end;
};

// Every limit, in the order the flags are listed.
const std::vector<LimitSpec>& limit_specs();

// The flag of the limit whose verdict check is `check` ("allocated-peak" ->
// "--max-allocated-peak").
std::string_view flag_of_check(std::string_view check);

// Whether any limit is set.
bool any_limit(const CheckOptions& o);
// The flags of the limits set, "--max-leaked-bytes, --max-growth"; "" when none.
std::string given_limit_flags(const CheckOptions& o);
// Every flag, "--max-leaked-bytes, --max-peak-bytes, ... or --max-growth-per-step".
std::string every_limit_flag();

// True for a snapshot written while its process ran (tool section reason "periodic", "request"
// or "oom"): what it holds is not what the process left at its end.
bool mid_run_snapshot(const snap::Snapshot& s);
// The same rule on a tool section's `reason` alone (a process's summary keeps it).
bool mid_run_reason(const std::string& reason);

// The table as JSON: {"limits": [{"name", "flag", "check", "help", "needs", "at_end"}...]}.
void write_limits_json(std::ostream& out);
// The table as text, one limit a line: "--max-leaked-bytes  max_leaked_bytes  needs ...".
void write_limits_text(std::ostream& out);

}  // namespace cumemtrace::analysis
