#include "live/rendezvous.h"

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace cumemtrace::collect {

namespace {

// Why a path in a private directory and not an abstract socket: an abstract name is reachable by
// every user in the network namespace (anyone could connect and be traced into this user's
// output directory, or squat the name first), so each connection would need an SO_PEERCRED check;
// a directory of mode 0700 leaves that check to the kernel at connect(). The price is a directory
// left behind when `run` is killed with SIGKILL, in a temporary directory.
std::string make_private_dir(std::string& why) {
  const char* candidates[] = {getenv("XDG_RUNTIME_DIR"), getenv("TMPDIR"), "/tmp"};
  for (const char* base : candidates) {
    if (!base || *base != '/') continue;
    std::string templ = fmt::format("{}/cumemtrace-{}-XXXXXX", base, getpid());
    // The socket's name must fit sun_path with "/control" after the directory.
    if (templ.size() + 9 > sizeof(sockaddr_un{}.sun_path)) continue;
    if (mkdtemp(templ.data())) return templ;  // mode 0700
    why = fmt::format("cannot create a directory in {}: {}", base, strerror(errno));
  }
  if (why.empty()) why = "no temporary directory with a short enough path";
  return {};
}

}  // namespace

std::string Rendezvous::open() {
  std::string why;
  dir_ = make_private_dir(why);
  if (dir_.empty()) return why;
  path_ = dir_ + "/control";
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  memcpy(addr.sun_path, path_.c_str(), path_.size() + 1);
  fd_ = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd_, SOMAXCONN) != 0) {
    why = fmt::format("cannot listen on {}: {}", path_, strerror(errno));
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    ::rmdir(dir_.c_str());
    dir_.clear();
    path_.clear();
    return why;
  }
  return {};
}

Rendezvous::~Rendezvous() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(path_.c_str());
  ::rmdir(dir_.c_str());
}

}  // namespace cumemtrace::collect
