#include "cli/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include "settings_table.h"

namespace cumemtrace::log {

namespace {

// Appends formatted records to a descriptor opened without following symlinks.
class FdSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit FdSink(int fd) : fd_(fd) {}
  ~FdSink() override { ::close(fd_); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    const char* p = buf.data();
    size_t left = buf.size();
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // a full disk loses log records, never the collector
      p += n;
      left -= static_cast<size_t>(n);
    }
  }
  void flush_() override {}

 private:
  int fd_;
};

}  // namespace

bool valid_level(const std::string& level) {
  return level == "off" || spdlog::level::from_str(level) != spdlog::level::off;
}

std::string init(const std::string& level, const std::string& output_dir) {
  std::string name = level;
  if (name.empty()) {
    const char* env = settings::from_env(settings::Id::kLog);
    name = env ? env : settings::row(settings::Id::kLog).fallback;
  }
  std::string problem;
  if (!valid_level(name)) {
    problem = fmt::format(
        "invalid log level '{}' (expected trace, debug, info, warn, error or off)", name);
    name = "warn";
  }
  std::shared_ptr<spdlog::sinks::sink> sink;
  if (const char* file = settings::from_env(settings::Id::kLogFile)) {
    std::string path = file;
    if (path[0] != '/' && !output_dir.empty()) path = output_dir + "/" + path;
    const int fd =
        ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd >= 0) {
      sink = std::make_shared<FdSink>(fd);
    } else if (problem.empty()) {
      problem = fmt::format("cannot open log file {}: {}", path, strerror(errno));
    }
  }
  if (!sink) sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("cumemtrace", sink);
  logger->set_pattern("cumemtrace [%Y-%m-%d %H:%M:%S.%e] [pid %P] [%l] %v");
  logger->set_level(spdlog::level::from_str(name));
  logger->flush_on(spdlog::level::trace);  // the collector may be killed: no buffered records
  spdlog::set_default_logger(std::move(logger));
  return problem;
}

}  // namespace cumemtrace::log
