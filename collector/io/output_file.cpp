#include "io/output_file.h"

namespace cumemtrace::io {

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

uint64_t write_output(const std::string& path, const io::OutputPolicy& policy,
                      const std::function<void(std::ostream&)>& fill) {
  return io::write_output_file(path, policy, fill);
}

}  // namespace cumemtrace::io
