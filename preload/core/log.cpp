#include "core/log.h"

#include <unistd.h>

#include <cstdio>

namespace cumemtrace::preload {

void print_line(const char* msg, const char* detail) noexcept {
  char buf[512];
  int n = snprintf(buf, sizeof buf, "cumemtrace: %s%s\n", msg, detail ? detail : "");
  if (n > 0) {
    ssize_t w = write(STDERR_FILENO, buf, static_cast<size_t>(n) < sizeof buf ? n : sizeof buf - 1);
    (void)w;
  }
}

}  // namespace cumemtrace::preload
