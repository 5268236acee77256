// Contract: how the preload speaks to the user: one "cumemtrace: MSG DETAIL" line on stderr with
// one write(2). No heap, no lock, no stdio buffer: safe from a hook, in a forked child and at exit.
// Everything the preload says goes through here, so a test can hold it to one line.
#pragma once

namespace cumemtrace::preload {

// Prints "cumemtrace: <msg><detail>" on stderr with one write(2).
void print_line(const char* msg, const char* detail = nullptr) noexcept;

}  // namespace cumemtrace::preload
