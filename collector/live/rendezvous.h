// Contract: `cumemtrace run`'s rendezvous, the second way a traced process reaches run's collector.
// The first is the control socket the program inherits (CUMEMTRACE_CONTROL_FD); a process whose
// parent closed its descriptors (Python's subprocess with close_fds, so torchrun's workers) or
// started it in a new session has lost that one, and connects instead to a listening
// SOCK_SEQPACKET Unix socket whose path `run` passes in CUMEMTRACE_CONTROL_SOCKET. Each connection
// carries one Hello exactly as the inherited socket does (preload/wire/control_protocol.h).
// open() creates the socket in a fresh private directory (mode 0700) under $XDG_RUNTIME_DIR, else
// $TMPDIR, else /tmp; the destructor removes both. Returns "" when listening, else one line why.
#pragma once

#include <string>

namespace cumemtrace::collect {

class Rendezvous {
 public:
  Rendezvous() = default;
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;
  ~Rendezvous();

  std::string open();
  // The listening socket (close-on-exec, non-blocking), -1 before open() succeeded.
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string dir_;
  std::string path_;
};

}  // namespace cumemtrace::collect
