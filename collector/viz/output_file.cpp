#include "viz/output_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>

namespace cumemtrace::viz {

namespace fs = std::filesystem;

std::string default_output_path(const std::string& input, const std::string& suffix) {
  std::string stem = input;
  for (const char* ext : {".json", ".pickle", ".pkl"}) {
    const std::string e = ext;
    if (stem.size() > e.size() && stem.compare(stem.size() - e.size(), e.size(), e) == 0) {
      stem.resize(stem.size() - e.size());
      break;
    }
  }
  return stem + suffix;
}

uint64_t write_output(const std::string& path, const std::function<void(std::ostream&)>& fill) {
  if (path == "-") {
    std::cout.exceptions(std::ios::badbit);
    fill(std::cout);
    std::cout.flush();
    if (!std::cout) throw std::runtime_error("cannot write to stdout");
    return 0;
  }
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot create " + tmp + ": " + std::strerror(errno));
    fill(out);
    out.flush();
    if (!out) {
      const int err = errno;
      std::error_code ec;
      fs::remove(tmp, ec);
      throw std::runtime_error("cannot write " + tmp + ": " + std::strerror(err));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw std::runtime_error("cannot rename " + tmp + " to " + path + ": " + ec.message());
  }
  return fs::file_size(path);
}

}  // namespace cumemtrace::viz
