// Contract: the signals a collector ignores. Each would end the process by default, and with it
// every trace the collector holds, yet none asks anything of a collector: SIGUSR1 and SIGUSR2
// (`kill -USR2 $(pgrep -f train.py)` reaches `cumemtrace run` too, whose argv names the program),
// the timers' and I/O signals, SIGPWR, SIGSTKFLT and the real-time signals. SIGTERM, SIGHUP and
// SIGINT are each caller's own business (`run` passes them on to its program), and so are the
// job-control stops. Header-only: `run` blocks these into its signalfd (the collector loop says
// each one it ignored), the detached collector sets them to SIG_IGN.
#pragma once

#include <signal.h>

namespace cumemtrace::collect {

template <typename Fn>
void for_each_ignored_signal(Fn&& fn) {
  for (int s : {SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGPROF, SIGIO, SIGPWR, SIGSTKFLT}) fn(s);
  for (int s = SIGRTMIN; s <= SIGRTMAX; ++s) fn(s);
}

inline void add_ignored_signals(sigset_t& set) {
  for_each_ignored_signal([&](int s) { sigaddset(&set, s); });
}

// For a collector that runs no program (SIG_IGN is inherited across exec).
inline void ignore_collector_signals() {
  for_each_ignored_signal([](int s) { signal(s, SIG_IGN); });
}

}  // namespace cumemtrace::collect
