// Contract: the messages between a traced process and its collector. The collector listens on a
// SOCK_SEQPACKET control socket (inherited as CUMEMTRACE_CONTROL_FD under `cumemtrace run`, or a
// socketpair made by the preload when it starts its own collector). A process that starts tracing
// sends one Hello with two descriptors attached (SCM_RIGHTS): the ring memfd and its end of a
// private "liveness" socketpair. The collector answers on that liveness socket with one Ack; from
// then on the socket only signals that the process is gone (EOF when its last copy closes).
// Variable parts follow the Hello in the same message: exe path, then argv and rank variables as
// NUL-terminated strings.
// The ring memfd's name, visible in /proc/PID/maps of every process that maps it, is
// kRingName (or kRingNameUsr2 when the process takes SIGUSR2 for snapshots), a dot and the pid of
// the process that made it: the producer. A collector maps its processes' rings too; the pid in
// the name tells `cumemtrace snapshot PID` a traced process from a collector.
#pragma once

#include <cstdint>

namespace cumemtrace::wire {

inline constexpr uint32_t kHelloMagic = 0x4f4c4548;  // "HELO"
inline constexpr uint32_t kAckMagic = 0x4b434148;    // "HACK"
inline constexpr uint32_t kMaxHelloBytes = 16384;
inline constexpr char kRingName[] = "cumemtrace-ring";
inline constexpr char kRingNameUsr2[] = "cumemtrace-ring-usr2";

struct Hello {
  uint32_t magic;
  uint32_t wire_version;
  int32_t pid;
  int32_t ppid;
  uint64_t ring_bytes;
  uint32_t exe_bytes;   // bytes of exe path, not NUL-terminated
  uint32_t argv_bytes;  // NUL-separated argv
  uint32_t rank_bytes;  // NUL-separated KEY=VALUE
  uint32_t reserved;
};

struct Ack {
  uint32_t magic;
  int32_t status;  // 0: tracing; otherwise tracing is off and `message` says why
  char message[240];
};

}  // namespace cumemtrace::wire
