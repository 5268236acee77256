// Contract: the one list of cumemtrace's user-facing settings, the CUMEMTRACE_* variables, and the
// one rule that reads them. Everything that names, parses or documents a setting reads this table:
// the preload's load_config (core/config.cpp), `cumemtrace run`'s options and the environment it
// passes on (collector/cli/settings_options.cpp), the collector's own reads (cmd_collect.cpp,
// log.cpp, main.cpp, live/driver_memory.cpp), the Python side inside the target
// (preload/python/cumemtrace_settings.py, tested against this list) and README's tables of
// settings, generated from this table with each row's help (scripts/settings_doc.py; the ctest
// `settings_table` fails when README differs, and checks that every CUMEMTRACE_* name read
// anywhere in the tree is a row here or a build/test-only variable).
//
// Each row: the variable, its kind (how its value is parsed: one function per kind,
// parse_setting), the range of a count or of seconds, the words of an enum ("precise|coarse"),
// the default as a user writes it ("" when none), `run`'s flag ("" when none) and the value's
// name in its help, who reads it, and the help `run --help` prints. The rule: an explicit flag
// beats the variable, which beats the default; `run` passes on to its program only what the user
// gave, so each default lives here once. A bad value gets exactly one `cumemtrace:` line naming
// the variable, the value and what was expected (bad_setting_line), and tracing off in the
// preload (the Python side: that feature off), or before the program starts under `run` (exit 2
// with a limit, else the program runs untraced, as for every reason tracing cannot start).
// Rows read by kHandOff are `run`'s own hand-off to its program (its control socket, --no-follow)
// or the pytest plugin's to the pytest it starts again, never the user's to set; README lists
// them in a table of their own.
//
// Plain data and inline functions on C strings: no heap, no exceptions, so that the preload reads
// it before main. Adding a setting is one row here plus its reader.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace cumemtrace::settings {

enum class Kind : uint8_t {
  kSwitch,   // 0 or 1
  kCount,    // a whole number in [lo, hi]
  kSeconds,  // a number of seconds in [lo, hi] thousandths
  kSize,     // bytes with a unit ("1GiB"); checked further by snap::parse_bytes in the collector
  kWords,    // one of `words`, separated by '|'
  kPath,     // a file or directory
  kLibrary,  // a shared library: an absolute path or a file name the loader searches for
  kText,     // free text, checked by its reader (ADDR:PORT, path parts)
};

// Who reads a setting (bits).
inline constexpr uint8_t kPreload = 1;         // libcumemtrace.so, core/config.cpp
inline constexpr uint8_t kCollector = 2;       // the cumemtrace executable (run, the collector)
inline constexpr uint8_t kPythonInTarget = 4;  // preload/python, inside the traced program
inline constexpr uint8_t kPythonPackage = 8;   // python/cumemtrace (API, pytest plugin)
inline constexpr uint8_t kHandOff = 16;        // set by `run` for its program only: not a user's

struct Setting {
  const char* variable;
  Kind kind;
  uint64_t lo, hi;
  const char* words;
  const char* fallback;  // the default, as the user writes it
  const char* flag;      // run's option, CLI11 spelling ("-o,--output")
  const char* value_name;
  uint8_t readers;
  const char* help;
};

constexpr uint64_t kNoLimit = uint64_t{INT64_MAX};

// X(id, variable, kind, lo, hi, words, default, flag, value name, readers, help)
#define CUMEMTRACE_SETTINGS(X)                                                                     \
  X(kOutput, "CUMEMTRACE_OUTPUT", kPath, 0, 0, "", ".", "-o,--output", "DIR",                      \
    kPreload | kCollector | kPythonPackage, "snapshot directory, created if missing")              \
  X(kStackDepth, "CUMEMTRACE_STACK_DEPTH", kCount, 0, 128, "", "32", "--stack-depth", "N",         \
    kPreload, "native frames per event (0: none)")                                                 \
  X(kBufferMb, "CUMEMTRACE_BUFFER_MB", kCount, 1, 4096, "", "8", "--buffer-mb", "MiB", kPreload,   \
    "ring size per process in MiB (up to 64 MiB of it is committed when tracing "                  \
    "starts)")                                                                                     \
  X(kMaxWaitMs, "CUMEMTRACE_MAX_WAIT_MS", kCount, 0, 3600000, "", "10000", "", "", kPreload,       \
    "how long a producer waits for a full ring before dropping, in ms")                            \
  X(kPythonStacks, "CUMEMTRACE_PYTHON_STACKS", kSwitch, 0, 1, "", "1", "", "", kPreload,           \
    "add the allocating thread's Python frames to stacks (0: off)")                                \
  X(kNativeAbovePython, "CUMEMTRACE_NATIVE_ABOVE_PYTHON", kSwitch, 0, 1, "", "0", "", "",          \
    kPreload,                                                                                      \
    "1 keeps the native frames above CPython's innermost evaluation loop (the "                    \
    "interpreter running the recorded Python frames); by default a stack with Python "             \
    "frames stops there (CPython 3.11+)")                                                          \
  X(kFreeStacks, "CUMEMTRACE_FREE_STACKS", kSwitch, 0, 1, "", "0", "--free-stacks", "", kPreload,  \
    "record a stack for releases too (frees, unmaps, PyTorch's free requests); by "                \
    "default only allocations carry one, as in memray, heaptrack and PyTorch's "                   \
    "context=\"alloc\"")                                                                           \
  X(kTorchNativeStacks, "CUMEMTRACE_TORCH_NATIVE_STACKS", kSwitch, 0, 1, "", "0",                  \
    "--torch-native-stacks", "", kPreload,                                                         \
    "give PyTorch's block events (and its cudaMallocAsync tensors) all their native frames too "   \
    "where they have Python ones or an autograd node's; by default such a stack is the Python "    \
    "frames (PyTorch's stacks=\"python\"), on autograd's engine thread the node's apply()")        \
  X(kClock, "CUMEMTRACE_CLOCK", kWords, 0, 0, "precise|coarse", "precise", "--clock", "CLOCK",     \
    kPreload,                                                                                      \
    "each event's time: precise (the default: the TSC, ns) or coarse (the kernel's tick, 1-4 "     \
    "ms; a cheaper read for allocation-bound programs)")                                           \
  X(kSlowUnwind, "CUMEMTRACE_SLOW_UNWIND", kSwitch, 0, 1, "", "0", "", "", kPreload,               \
    "1 uses the platform unwinder instead of the caching one")                                     \
  X(kDebug, "CUMEMTRACE_DEBUG", kSwitch, 0, 1, "", "0", "", "", kPreload,                          \
    "1 prints the preload's diagnostics: why Python frames of GIL-less threads turned "            \
    "off; at exit how many stacks fell back to the platform unwinder and where, how "              \
    "often the ring was full and how long the program waited for the collector "                   \
    "(--buffer-mb raises the ring's size), and how long recording took per event")                 \
  X(kCollectorPath, "CUMEMTRACE_COLLECTOR", kPath, 0, 0, "", "", "", "", kPreload,                 \
    "path of the cumemtrace executable (default: ../bin next to the library)")                     \
  X(kMaxTraceEvents, "CUMEMTRACE_MAX_TRACE_EVENTS", kCount, 0, kNoLimit, "", "0",                  \
    "--max-trace-events", "N", kCollector,                                                         \
    "keep only the newest N trace entries (live state stays complete); 0 = all")                   \
  X(kSnapshotEvery, "CUMEMTRACE_SNAPSHOT_EVERY", kSeconds, 1, 1000000000000, "", "",               \
    "--snapshot-every", "SECONDS", kCollector,                                                     \
    "also write EXE.PID.periodic-N.json every SECONDS while a process runs")                       \
  X(kKeep, "CUMEMTRACE_KEEP", kWords, 0, 0, "all|bounded", "all", "--keep", "KEEP", kCollector,    \
    "all (default): every file whole; bounded: per-interval summaries (EXE.PID.intervals.json) "   \
    "plus snapshot windows at peaks, growth, OOMs and requests, under --max-disk "                 \
    "(docs/report.md)")                                                                            \
  X(kMaxDisk, "CUMEMTRACE_MAX_DISK", kSize, 0, 0, "", "1GiB", "--max-disk", "SIZE", kCollector,    \
    "--keep bounded: cap on the bytes written (default 1GiB); the least telling windows are "      \
    "dropped first")                                                                               \
  X(kInterval, "CUMEMTRACE_INTERVAL", kSeconds, 0, 1000000000000, "", "10", "--interval",          \
    "SECONDS", kCollector,                                                                         \
    "--keep bounded: seconds per interval summary (default 10; whole iterations where "            \
    "PyTorch's steps are marked; 0: every iteration)")                                             \
  X(kMetrics, "CUMEMTRACE_METRICS", kText, 0, 0, "", "", "--metrics", "ADDR:PORT", kCollector,     \
    "serve live gauges for Prometheus at http://ADDR:PORT/metrics while the program runs (PORT "   \
    "alone: 127.0.0.1; port 0: a free one, printed)")                                              \
  X(kMetricsPublic, "CUMEMTRACE_METRICS_PUBLIC", kSwitch, 0, 1, "", "0", "--metrics-public", "",   \
    kCollector, "let --metrics listen on an address other than loopback")                          \
  X(kNvmlLibrary, "CUMEMTRACE_NVML_LIBRARY", kLibrary, 0, 0, "", "libnvidia-ml.so.1", "", "",      \
    kCollector,                                                                                    \
    "NVML to load instead of libnvidia-ml.so.1: an absolute path or a file name the "              \
    "loader searches for")                                                                         \
  X(kLog, "CUMEMTRACE_LOG", kWords, 0, 0, "trace|debug|info|warn|error|off", "warn",               \
    "--log-level", "LEVEL", kCollector,                                                            \
    "the collector's own diagnostics: trace, debug, info, warn, error or off (default: "           \
    "CUMEMTRACE_LOG, else warn)")                                                                  \
  X(kLogFile, "CUMEMTRACE_LOG_FILE", kPath, 0, 0, "", "", "", "", kCollector,                      \
    "send the collector's diagnostics to this file instead of stderr (appended; a "                \
    "relative name is in the snapshot directory; never through a symlink)")                        \
  X(kLibraryCode, "CUMEMTRACE_LIBRARY_CODE", kText, 0, 0, "", "", "", "", kCollector,              \
    "comma-separated path parts whose Python frames are library code (never a site), "             \
    "!PART the user's own (docs/check.md's site rule); every offline command takes "               \
    "--library-code PARTS too")                                                                    \
  X(kModelCode, "CUMEMTRACE_MODEL_CODE", kText, 0, 0, "", "/models/", "", "", kCollector,          \
    "comma-separated path parts of a framework's model files (default /models/: transformers' "    \
    "modeling_*.py); when the user's own innermost line is a trainer's entry (trainer.train(), "   \
    "fit()), the model file's line stands as the site; ',' (no part) keeps the user's line; "      \
    "every offline command takes --model-code PARTS too")                                          \
  X(kPreloadPath, "CUMEMTRACE_PRELOAD", kPath, 0, 0, "", "", "", "", kCollector,                   \
    "the libcumemtrace.so that run preloads (default: ../lib next to the executable)")             \
  X(kTorch, "CUMEMTRACE_TORCH", kSwitch, 0, 1, "", "1", "", "", kPythonInTarget,                   \
    "0 keeps a PyTorch program at driver level (no capture of PyTorch's "                          \
    "caching-allocator blocks)")                                                                   \
  X(kPhases, "CUMEMTRACE_PHASES", kSwitch, 0, 1, "", "1", "", "", kPythonInTarget,                 \
    "0 turns off a PyTorch program's automatic phases (auto:forward, auto:backward, "              \
    "auto:optimizer, auto:step) and ownership walks (docs/pytorch.md)")                            \
  X(kControlFd, "CUMEMTRACE_CONTROL_FD", kCount, 0, 1u << 20, "", "", "", "", kPreload | kHandOff, \
    "run's control socket, inherited")                                                             \
  X(kControlSocket, "CUMEMTRACE_CONTROL_SOCKET", kPath, 0, 0, "", "", "", "", kPreload | kHandOff, \
    "run's rendezvous socket")                                                                     \
  X(kFollow, "CUMEMTRACE_FOLLOW", kSwitch, 0, 1, "", "1", "", "", kPreload | kHandOff,             \
    "run --no-follow sets 0: only the process CUMEMTRACE_ROOT_PID is traced, not its "             \
    "children (default 1: every process the program starts)")                                      \
  X(kRootPid, "CUMEMTRACE_ROOT_PID", kCount, 1, kNoLimit, "", "", "", "", kPreload | kHandOff,     \
    "run --no-follow: the one process traced")                                                     \
  X(kPytestReexec, "CUMEMTRACE_PYTEST_REEXEC", kSwitch, 0, 1, "", "", "", "",                      \
    kPythonPackage | kHandOff, "the pytest plugin's mark on the pytest it runs again under run")
enum class Id : uint8_t {
#define CUMEMTRACE_SETTING_ID(id, ...) id,
  CUMEMTRACE_SETTINGS(CUMEMTRACE_SETTING_ID)
#undef CUMEMTRACE_SETTING_ID
};

inline constexpr Setting kTable[] = {
#define CUMEMTRACE_SETTING_ROW(id, var, kind, lo, hi, words, def, flag, value, readers, help) \
  {var, Kind::kind, lo, hi, words, def, flag, value, static_cast<uint8_t>(readers), help},
    CUMEMTRACE_SETTINGS(CUMEMTRACE_SETTING_ROW)
#undef CUMEMTRACE_SETTING_ROW
};
inline constexpr size_t kCount = sizeof kTable / sizeof kTable[0];

constexpr const Setting& row(Id id) {
  return kTable[static_cast<size_t>(id)];
}

// The variable's value in the environment, or null when unset; an empty value counts as unset
// (`VAR= program` is how a shell clears one for a single command).
inline const char* from_env(const Setting& s) noexcept {
  const char* v = getenv(s.variable);
  return v && *v ? v : nullptr;
}
inline const char* from_env(Id id) noexcept {
  return from_env(row(id));
}

// A value read by its kind's rule. `text` is the value as given; `number` a count, a switch
// (0/1), seconds (as a double in `seconds`) or the index of an enum's word.
struct Value {
  const char* text = nullptr;
  uint64_t number = 0;
  double seconds = 0;
};

namespace detail {

inline bool parse_count(const char* s, uint64_t& out) noexcept {
  if (!*s) return false;
  uint64_t v = 0;
  for (const char* p = s; *p; ++p) {
    if (*p < '0' || *p > '9') return false;
    const uint64_t d = static_cast<uint64_t>(*p - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  out = v;
  return true;
}

// The index of `s` among the '|'-separated `words`, or -1.
inline int word_index(const char* words, const char* s) noexcept {
  const size_t n = strlen(s);
  int i = 0;
  for (const char* w = words; *w; ++i) {
    const char* end = strchr(w, '|');
    const size_t len = end ? static_cast<size_t>(end - w) : strlen(w);
    if (n && len == n && strncmp(w, s, n) == 0) return i;
    if (!end) break;
    w = end + 1;
  }
  return -1;
}

inline bool has_control_char(const char* s) noexcept {
  for (const char* p = s; *p; ++p) {
    if (static_cast<unsigned char>(*p) < 0x20) return true;
  }
  return false;
}

}  // namespace detail

// The one parsing rule: true when `text` is a value of `s`, with `out` filled.
inline bool parse(const Setting& s, const char* text, Value& out) noexcept {
  out = Value{};
  out.text = text;
  if (!text) return false;
  switch (s.kind) {
    case Kind::kSwitch:
    case Kind::kCount:
      return detail::parse_count(text, out.number) && out.number >= s.lo && out.number <= s.hi;
    case Kind::kSeconds: {
      if (!*text) return false;
      char* end = nullptr;
      out.seconds = strtod(text, &end);
      const double thousandths = out.seconds * 1000;
      return !*end && thousandths >= static_cast<double>(s.lo) &&
             thousandths <= static_cast<double>(s.hi);
    }
    case Kind::kWords: {
      const int i = detail::word_index(s.words, text);
      out.number = i < 0 ? 0 : static_cast<uint64_t>(i);
      return i >= 0;
    }
    case Kind::kLibrary:
      // dlopen's two forms: a path from the root, or a file name it searches for. Anything else
      // (a relative path, which would depend on the directory the program runs in) is a mistake.
      return *text && !detail::has_control_char(text) && (text[0] == '/' || !strchr(text, '/')) &&
             strstr(text, ".so");
    case Kind::kSize:
    case Kind::kPath:
    case Kind::kText:
      return *text && !detail::has_control_char(text);
  }
  return false;
}

// What `s` expects, in words, for the line a bad value gets: "0 or 1", "0..128",
// "precise or coarse".
inline void describe(const Setting& s, char* buf, size_t n) noexcept {
  switch (s.kind) {
    case Kind::kSwitch:
      snprintf(buf, n, "0 or 1");
      return;
    case Kind::kCount:
      snprintf(buf, n, "%llu..%llu", static_cast<unsigned long long>(s.lo),
               static_cast<unsigned long long>(s.hi));
      return;
    case Kind::kSeconds:
      snprintf(buf, n, "seconds, %g to %g", static_cast<double>(s.lo) / 1000,
               static_cast<double>(s.hi) / 1000);
      return;
    case Kind::kWords: {
      // "a|b|c" -> "a, b or c"
      size_t used = 0;
      buf[0] = '\0';
      const char* last = strrchr(s.words, '|');
      for (const char* w = s.words; *w && used + 1 < n; ++w) {
        const char* sep = *w == '|' ? (w == last ? " or " : ", ") : nullptr;
        const int wrote = sep ? snprintf(buf + used, n - used, "%s", sep)
                              : snprintf(buf + used, n - used, "%c", *w);
        used += wrote > 0 ? static_cast<size_t>(wrote) : 0;
      }
      if (used >= n) buf[n - 1] = '\0';
      return;
    }
    case Kind::kLibrary:
      snprintf(buf, n, "a shared library: an absolute path or a file name");
      return;
    case Kind::kSize:
      snprintf(buf, n, "a size");
      return;
    case Kind::kPath:
      snprintf(buf, n, "a path");
      return;
    case Kind::kText:
      snprintf(buf, n, "text");
      return;
  }
}

// "invalid CUMEMTRACE_X (expected WHAT)", the start of the one line a bad value gets; the caller
// adds the consequence and the value.
inline void bad_setting_line(const Setting& s, char* buf, size_t n) noexcept {
  char expected[96];
  describe(s, expected, sizeof expected);
  snprintf(buf, n, "invalid %s (expected %s)", s.variable, expected);
}

}  // namespace cumemtrace::settings
