#include "cli/secure_exec.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <fmt/format.h>

namespace cumemtrace::cli {

namespace {

// execvp's search: the first entry of $PATH (an empty entry is the current directory) holding an
// executable regular file of that name.
std::string resolve(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* env = getenv("PATH");
  const std::string path = env ? env : "/bin:/usr/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    const std::string dir = end == start ? "." : path.substr(start, end - start);
    const std::string candidate = dir + "/" + program;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
    start = end + 1;
  }
  return {};
}

}  // namespace

std::string secure_exec_problem(const std::string& program) {
  const std::string path = resolve(program);
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
  struct statvfs fs {};
  const bool nosuid = ::statvfs(path.c_str(), &fs) == 0 && (fs.f_flag & ST_NOSUID);
  const char* what = nullptr;
  if (!nosuid && (st.st_mode & S_ISUID) && st.st_uid != ::getuid()) {
    what = "is setuid";
  } else if (!nosuid && (st.st_mode & S_ISGID) && (st.st_mode & S_IXGRP) &&
             st.st_gid != ::getgid()) {
    what = "is setgid";
  } else if (!nosuid && ::getxattr(path.c_str(), "security.capability", nullptr, 0) > 0) {
    what = "has file capabilities";
  }
  if (!what) return {};
  return fmt::format("{} {}: the loader ignores LD_PRELOAD for it", program, what);
}

}  // namespace cumemtrace::cli
