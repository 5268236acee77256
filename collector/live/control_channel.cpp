#include "live/control_channel.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "control_protocol.h"

namespace cumemtrace::collect {

Received recv_with_fds(int fd, char* buf, size_t cap) {
  // Room for more descriptors than a Hello carries: extra ones are received, then closed by the
  // caller when it rejects the message.
  alignas(cmsghdr) char cbuf[CMSG_SPACE(4 * sizeof(int))];
  iovec iov{buf, cap};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  Received r;
  do {
    r.bytes = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
  } while (r.bytes < 0 && errno == EINTR);
  if (r.bytes <= 0) return r;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int passed;
      memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof passed);
      r.fds.push_back(passed);
    }
  }
  return r;
}

bool send_ack(int fd, int status, const std::string& message) {
  wire::Ack ack{};
  ack.magic = wire::kAckMagic;
  ack.status = status;
  snprintf(ack.message, sizeof ack.message, "%s", message.c_str());
  ssize_t r;
  do {
    r = send(fd, &ack, sizeof ack, MSG_NOSIGNAL);
  } while (r < 0 && errno == EINTR);
  return r == static_cast<ssize_t>(sizeof ack);
}

}  // namespace cumemtrace::collect
