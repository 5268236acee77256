#include "live/output_dir.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include <fmt/format.h>

namespace cumemtrace::collect {

std::string prepare_output_dir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fmt::format("cannot create output directory {}: {}", dir, ec.message());
  if (!std::filesystem::is_directory(dir, ec)) {
    return fmt::format("output path {} is not a directory", dir);
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return fmt::format("cannot write to output directory {}", dir);
  }
  return {};
}

}  // namespace cumemtrace::collect
