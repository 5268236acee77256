#include "io/file_output.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <random>
#include <streambuf>

#include <fmt/format.h>

#include "io/input_file.h"

namespace cumemtrace::io {

namespace {

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The problem with the existing file at `path` (lstat'ed into `st`), or "".
std::string existing_problem(const std::string& path, const struct stat& st,
                             const OutputPolicy& policy) {
  for (const auto& in : policy.inputs) {
    struct stat is {};
    if (in != "-" && ::stat(in.c_str(), &is) == 0 && is.st_dev == st.st_dev &&
        is.st_ino == st.st_ino) {
      return fmt::format("{}: is the input file {}; refusing to overwrite it", path, in);
    }
  }
  if (!S_ISREG(st.st_mode)) {
    return fmt::format(
        "{}: expected a new or regular file to write, found {}; refusing to "
        "replace it",
        path, describe_file_type(st.st_mode));
  }
  if (!policy.force) {
    return fmt::format("{}: already exists; pass -f/--force to overwrite it", path);
  }
  return {};
}

// A streambuf over a file descriptor that remembers the first write error.
class FdBuf : public std::streambuf {
 public:
  explicit FdBuf(int fd) : fd_(fd) { setp(buf_, buf_ + sizeof buf_); }
  int error() const { return error_; }
  uint64_t written() const { return written_; }

 protected:
  int_type overflow(int_type ch) override {
    if (!flush_buffer()) return traits_type::eof();
    if (!traits_type::eq_int_type(ch, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(ch);
      pbump(1);
    }
    return traits_type::not_eof(ch);
  }
  int sync() override { return flush_buffer() ? 0 : -1; }

 private:
  bool flush_buffer() {
    const char* p = pbase();
    size_t left = static_cast<size_t>(pptr() - pbase());
    while (left > 0 && !error_) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno != EINTR) error_ = errno;
        continue;
      }
      p += n;
      left -= static_cast<size_t>(n);
      written_ += static_cast<uint64_t>(n);
    }
    setp(buf_, buf_ + sizeof buf_);
    return !error_;
  }

  int fd_;
  int error_ = 0;
  uint64_t written_ = 0;
  char buf_[1 << 16];
};

}  // namespace

std::string output_problem(const std::string& path, const OutputPolicy& policy) {
  if (path == "-") return {};
  if (path.empty() || path.back() == '/') {
    return fmt::format("{}: expected a file name to write", path);
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (auto p = existing_problem(path, st, policy); !p.empty()) return p;
  } else if (errno != ENOENT) {
    return fmt::format("{}: cannot stat: {}", path, std::strerror(errno));
  }
  const std::string dir = dir_of(path);
  struct stat ds {};
  if (::stat(dir.c_str(), &ds) != 0) {
    return fmt::format("{}: cannot write into {}: {}", path, dir, std::strerror(errno));
  }
  if (!S_ISDIR(ds.st_mode)) return fmt::format("{}: {} is not a directory", path, dir);
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return fmt::format("{}: cannot write into {}: {}", path, dir, std::strerror(errno));
  }
  return {};
}

uint64_t write_output_file(const std::string& path, const OutputPolicy& policy,
                           const std::function<void(std::ostream&)>& fill) {
  if (path == "-") {
    // A failed write (a full disk, /dev/full, a closed pipe) stops the fill at once and is one
    // line naming stdout and why, never the stream library's "basic_ios::clear".
    int err = 0;
    std::cout.exceptions(std::ios::badbit);
    try {
      fill(std::cout);
      std::cout.flush();
    } catch (const std::ios_base::failure&) {
      err = errno;
    }
    std::cout.exceptions(std::ios::goodbit);
    if (err || !std::cout) {
      throw OutputFileError(err ? fmt::format("cannot write to stdout: {}", std::strerror(err))
                                : std::string("cannot write to stdout"));
    }
    return 0;
  }
  if (auto p = output_problem(path, policy); !p.empty()) throw OutputFileError(p);

  // The temporary: a fresh name in the target's directory, never an existing file or symlink.
  const std::string dir = dir_of(path);
  std::random_device rd;
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    tmp = fmt::format("{}/.{}.tmp.{}.{:08x}", dir, base_of(path), ::getpid(), rd());
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    throw OutputFileError(fmt::format("{}: cannot create a temporary file in {}: {}", path, dir,
                                      std::strerror(errno)));
  }
  int err = 0;
  uint64_t bytes = 0;
  try {
    FdBuf buf(fd);
    std::ostream out(&buf);
    out.exceptions(std::ios::badbit);
    try {
      fill(out);
      out.flush();
    } catch (const std::ios_base::failure&) {
      // The stream failed because a write() did: buf.error() says why.
    }
    err = buf.error();
    if (!err && !out) err = EIO;
    bytes = buf.written();
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0 && !err) err = errno;
  if (err) {
    ::unlink(tmp.c_str());
    throw OutputFileError(fmt::format("{}: cannot write: {}", path, std::strerror(err)));
  }
  int rc;
  if (policy.force) {
    // Checked again just before the rename: a symlink or directory planted meanwhile is refused.
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0) {
      if (auto p = existing_problem(path, st, policy); !p.empty()) {
        ::unlink(tmp.c_str());
        throw OutputFileError(p);
      }
    }
    rc = ::rename(tmp.c_str(), path.c_str());
  } else {
    rc = ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
    if (rc != 0 && (errno == EINVAL || errno == ENOSYS)) {
      // A file system without RENAME_NOREPLACE: link() never replaces either.
      rc = ::link(tmp.c_str(), path.c_str());
      if (rc == 0) ::unlink(tmp.c_str());
    }
  }
  if (rc != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    if (e == EEXIST) {
      throw OutputFileError(
          fmt::format("{}: already exists; pass -f/--force to overwrite it", path));
    }
    throw OutputFileError(
        fmt::format("{}: cannot rename {} onto it: {}", path, tmp, std::strerror(e)));
  }
  return bytes;
}

}  // namespace cumemtrace::io
