// Contract: whether the dynamic loader will run PROGRAM in secure mode (AT_SECURE), in which it
// ignores LD_PRELOAD and LD_LIBRARY_PATH, so that `cumemtrace run` can say so before it starts the
// program instead of reporting "no CUDA allocation seen" after. PROGRAM is resolved as execvp does
// (a name with a slash as given, else the first executable regular file on $PATH). The kernel
// runs it in secure mode when exec changes the effective user or group: a set-user-ID file owned
// by another user than the caller (its real user: the loader compares the effective ids after exec
// with the real ones), or a set-group-ID (and group-executable) file
// of another group, on a file system mounted without nosuid; or when the file carries
// capabilities (security.capability). Returns "" when the loader will honour LD_PRELOAD, else
// the phrase "PROGRAM is setuid: the loader ignores LD_PRELOAD for it" (setgid, "has file
// capabilities" likewise). A program that cannot be found or read is "" (exec reports that).
#pragma once

#include <string>

namespace cumemtrace::cli {

std::string secure_exec_problem(const std::string& program);

}  // namespace cumemtrace::cli
