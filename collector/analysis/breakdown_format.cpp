#include "analysis/breakdown_format.h"

#include <fmt/format.h>

#include "snapshot/size_format.h"

namespace cumemtrace::analysis {

std::string format_time(int64_t time_us, int64_t origin_us) {
  const int64_t d = time_us - origin_us;
  const int64_t a = d < 0 ? -d : d;
  return fmt::format("{}{}.{:06d} s", d < 0 ? "-" : "+", a / 1000000, a % 1000000);
}

std::string plural(uint64_t n, std::string_view one) {
  const bool sibilant = !one.empty() && one.back() == 's';  // "2 processes", not "2 processs"
  return fmt::format("{} {}{}", n, one, n == 1 ? "" : sibilant ? "es" : "s");
}

std::string live_count_text(const LiveCount& c) {
  if (!c.pytorch) return plural(c.count, "allocation");
  if (c.pytorch == c.count) return plural(c.count, "PyTorch tensor");
  return fmt::format("{}: {} ({}) and {} ({})", plural(c.count, "allocation"),
                     plural(c.pytorch, "PyTorch tensor"), snap::format_bytes(c.pytorch_bytes),
                     plural(c.count - c.pytorch, "driver allocation"),
                     snap::format_bytes(c.bytes - c.pytorch_bytes));
}

namespace {

std::string signed_bytes(int64_t v) {
  // fmt, not "-" + std::string: GCC 12 at -O3 (Release) warns a false -Wrestrict there.
  return v >= 0 ? snap::format_bytes(static_cast<uint64_t>(v))
                : fmt::format("-{}", snap::format_bytes(0 - static_cast<uint64_t>(v)));
}

}  // namespace

std::string_view layers_peak_name(const Breakdown& b) {
  return b.reserved_peak ? "the reserved peak" : "the peak";
}

std::string pytorch_layers_text(const Breakdown& b) {
  if (!b.has_pytorch) return {};
  std::string out = fmt::format(
      "reserved {} = allocated {} + cached {} free", snap::format_bytes(b.pytorch_reserved),
      snap::format_bytes(b.pytorch_allocated), snap::format_bytes(b.cached_free));
  if (b.largest_free_block)
    out += fmt::format(", largest free block {}", snap::format_bytes(*b.largest_free_block));
  return out;
}

std::string driver_layers_text(const Breakdown& b, size_t max_libraries) {
  if (!b.driver_visible) return {};
  std::string out = fmt::format("driver-visible {} = ", snap::format_bytes(*b.driver_visible));
  if (b.context) {
    out += fmt::format("CUDA context {} + other untracked {}", snap::format_bytes(*b.context),
                       signed_bytes(b.other_untracked));
  } else {
    out += fmt::format("untracked {} (CUDA context not measured)", signed_bytes(b.untracked));
  }
  if (!b.has_pytorch || b.other_libraries) {
    out += fmt::format(" + {} {}", b.has_pytorch ? "other libraries" : "tracked",
                       snap::format_bytes(b.other_libraries));
    std::string libs;
    for (size_t i = 0; i < b.by_library.size() && i < max_libraries; ++i)
      libs += fmt::format("{}{} {}", libs.empty() ? "" : ", ", b.by_library[i].first,
                          snap::format_bytes(b.by_library[i].second));
    if (b.by_library.size() > max_libraries) libs += ", ...";
    if (!libs.empty()) out += " (" + libs + ")";
  }
  if (b.has_pytorch)
    out +=
        fmt::format(" + {} reserved {}", b.reserved_owner, snap::format_bytes(b.pytorch_reserved));
  return out;
}

}  // namespace cumemtrace::analysis
