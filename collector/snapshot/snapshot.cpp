#include "snapshot/snapshot.h"

#include <array>

namespace cumemtrace::snap {

namespace {
constexpr std::array<std::string_view, 9> kActionNames = {
    "alloc",       "free_requested", "free_completed", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap",  "snapshot",       "oom",
};
}  // namespace

std::string_view action_name(Action a) {
  return kActionNames[static_cast<size_t>(a)];
}

std::optional<Action> parse_action(std::string_view s) {
  for (size_t i = 0; i < kActionNames.size(); ++i) {
    if (kActionNames[i] == s) return static_cast<Action>(i);
  }
  return std::nullopt;
}

}  // namespace cumemtrace::snap
