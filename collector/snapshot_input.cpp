#include "snapshot_input.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "viz/pickle_reader.h"

namespace cumemtrace::snap {

std::string read_input_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ReadError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw ReadError(fmt::format("{}: expected a regular file", path));
  std::string bytes;
  try {
    // The size is a hint: the file may grow or shrink while it is read; read() says when it ends.
    bytes.resize(static_cast<size_t>(st.st_size) + 1);
    size_t have = 0;
    for (;;) {
      if (have == bytes.size()) bytes.resize(bytes.size() * 2);
      const ssize_t n = ::read(fd, bytes.data() + have, bytes.size() - have);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw ReadError(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
      }
      if (n == 0) break;
      have += static_cast<size_t>(n);
    }
    bytes.resize(have);
  } catch (const std::bad_alloc&) {
    throw ReadError(fmt::format("{}: expected a file that fits in memory", path));
  }
  return bytes;
}

Snapshot read_snapshot_any(const std::string& path) {
  const std::string bytes = read_input_file(path);
  if (bytes.empty())
    throw ReadError(fmt::format("{}:offset 0: expected a snapshot, found an empty file", path));
  if (viz::looks_like_pickle(bytes)) return viz::read_pickle_snapshot(bytes, path);
  return read_snapshot(bytes, path);
}

}  // namespace cumemtrace::snap
