#include "io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "snapshot/size_format.h"

namespace cumemtrace::io {

namespace {

struct Fd {
  int fd = -1;
  bool owned = true;
  ~Fd() {
    if (owned && fd >= 0) ::close(fd);
  }
};

[[noreturn]] void fail(const std::string& path, std::string_view doing, int err) {
  throw InputFileError(fmt::format("{}: {}: {}", path, doing, std::strerror(err)));
}

// Reads until `buf` is full or the input ends; the count read.
size_t read_full(int fd, const std::string& name, char* buf, size_t size) {
  size_t len = 0;
  while (len < size) {
    const ssize_t n = ::read(fd, buf + len, size - len);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail(name, "cannot read", errno);
    }
    if (n == 0) break;
    len += static_cast<size_t>(n);
  }
  return len;
}

}  // namespace

std::string describe_file_type(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
    case S_IFLNK:
      return "a symbolic link";
    default:
      return "not a regular file";
  }
}

std::string read_input_file(const std::string& path, std::string_view what, uint64_t max_bytes,
                            HeadCheck head_check) {
  const bool stdin_input = path == "-";
  const std::string name = stdin_input ? "<stdin>" : path;
  Fd f;
  uint64_t expected = 0;  // the size fstat reported; 0 for stdin
  if (stdin_input) {
    f.fd = STDIN_FILENO;
    f.owned = false;
  } else {
    // O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever.
    f.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f.fd < 0) fail(name, "cannot open", errno);
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) fail(name, "cannot stat", errno);
    if (!S_ISREG(st.st_mode)) {
      throw InputFileError(fmt::format("{}: expected a regular file ({}), found {}", name, what,
                                       describe_file_type(st.st_mode)));
    }
    if (static_cast<uint64_t>(st.st_size) > max_bytes) {
      throw InputFileError(fmt::format("{}: expected {} of at most {}, found {}", name, what,
                                       snap::format_bytes(max_bytes),
                                       snap::format_bytes(static_cast<uint64_t>(st.st_size))));
    }
    expected = static_cast<uint64_t>(st.st_size);
    const int fl = ::fcntl(f.fd, F_GETFL);
    if (fl >= 0) ::fcntl(f.fd, F_SETFL, fl & ~O_NONBLOCK);
  }
  // The first bytes, judged before anything else is read or allocated.
  char head[kHeadBytes];
  const size_t head_len = read_full(f.fd, name, head, sizeof head);
  if (head_check) {
    if (auto bad = head_check(std::string_view(head, head_len)); !bad.empty()) {
      throw InputFileError(fmt::format("{}:{}", name, bad));
    }
  }
  // read() straight into the result, which grows (doubling, within the bound) only for stdin or
  // a file that grew after fstat.
  std::string data;
  size_t len = head_len;
  try {
    data.resize(std::max(head_len, static_cast<size_t>(std::min<uint64_t>(
                                       std::max<uint64_t>(expected + 1, 1 << 16), max_bytes + 1))));
    std::memcpy(data.data(), head, head_len);
    for (;;) {
      if (len == data.size()) {
        if (len > max_bytes) {
          throw InputFileError(fmt::format("{}: expected {} of at most {}", name, what,
                                           snap::format_bytes(max_bytes)));
        }
        data.resize(static_cast<size_t>(std::min<uint64_t>(uint64_t{len} * 2, max_bytes + 1)));
      }
      const ssize_t n = ::read(f.fd, data.data() + len, data.size() - len);
      if (n < 0) {
        if (errno == EINTR) continue;
        fail(name, "cannot read", errno);
      }
      if (n == 0) break;
      len += static_cast<size_t>(n);
    }
  } catch (const std::bad_alloc&) {
    throw InputFileError(fmt::format("{}: expected {} that fits in memory", name, what));
  }
  if (len > max_bytes) {
    throw InputFileError(
        fmt::format("{}: expected {} of at most {}", name, what, snap::format_bytes(max_bytes)));
  }
  data.resize(len);
  return data;
}

void check_line_lengths(std::string_view text, const std::string& path, size_t max_line) {
  size_t line = 1, start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (end - start > max_line) {
      throw InputFileError(fmt::format("{}:{}: expected lines of at most {} bytes, found {}", path,
                                       line, max_line, end - start));
    }
    start = end + 1;
    ++line;
  }
}

}  // namespace cumemtrace::io
