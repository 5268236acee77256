// The collector's end of the control channel (wire format: preload/wire/control_protocol.h).
//
// Contract: recv_with_fds reads one message into buf (at most cap bytes) with every descriptor
// passed alongside it, received close-on-exec and retried on EINTR; bytes <= 0 means EOF or an
// error, and then fds is empty. The caller owns the descriptors. send_ack answers a Hello on the
// process's liveness socket; it never raises SIGPIPE and reports whether the whole Ack was sent.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <vector>

namespace cumemtrace::collect {

struct Received {
  ssize_t bytes = 0;
  std::vector<int> fds;
};

Received recv_with_fds(int fd, char* buf, size_t cap);

bool send_ack(int fd, int status, const std::string& message);

}  // namespace cumemtrace::collect
