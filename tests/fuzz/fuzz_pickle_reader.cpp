// libFuzzer target for the pickle reader (viz/pickle_reader.h). Contract checked on every input:
// it either returns a Snapshot or throws ReadError with a one-line message naming the input,
// never crashes, hangs or trips a sanitizer; an accepted snapshot written as JSON reads back and
// writes the same bytes again.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "snapshot/pickle_reader.h"
#include "snapshot/snapshot_json_writer.h"
#include "snapshot/snapshot_reader.h"

using namespace cumemtrace;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  snap::Snapshot s;
  try {
    s = snap::read_pickle_snapshot(bytes, "fuzz.pickle");
  } catch (const snap::ReadError& e) {
    const std::string_view what = e.what();
    if (what.find('\n') != std::string_view::npos || what.rfind("fuzz.pickle", 0) != 0)
      std::abort();
    return 0;
  }
  const std::string once = snap::to_json(s);
  const std::string twice = snap::to_json(snap::read_snapshot(once, "rewritten.json"));
  if (once != twice) std::abort();
  return 0;
}
