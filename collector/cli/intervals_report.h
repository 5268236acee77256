// Contract: `cumemtrace report` on a bounded capture's interval summary (EXE.PID.intervals.json,
// written by live/process_session.cpp from live/interval_log.h; keys in docs/report.md): one row
// per interval (iterations, events, allocations and frees with their bytes, live bytes at the
// close, the interval's peak, PyTorch's reserved and the driver-visible bytes where known, the
// top site), then the windows kept and those dropped with why. is_intervals_file() tells such a
// file by its name; report DIR shows every one in the directory after the processes' table.
// A file that is not such a summary is one line and false.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace cumemtrace::cli {

bool is_intervals_file(const std::string& path);
// The summaries directly inside `dir`, in name order.
std::vector<std::string> intervals_files_in(const std::string& dir);
// Prints the text (or, for "json", the file itself); false with one line on `err` when unreadable.
bool print_intervals(const std::string& path, const std::string& format, std::ostream& out,
                     std::ostream& err);

}  // namespace cumemtrace::cli
