#include "snapshot/snapshot.h"

#include <algorithm>
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

namespace {
constexpr std::array<std::string_view, 15> kCategoryNames = {
    "",
    "parameter",
    "gradient",
    "optimizer_state",
    "activation",
    "temporary",
    "input",
    "autograd",
    "unknown",
    "library",
    "program",
    "parameter_unsharded",
    "cublas_workspace",
    "communication",
    "kv_cache",
};
constexpr std::array<std::string_view, 9> kOwnerRoleNames = {
    "",        "parameter",           "gradient",         "optimizer_state",
    "input",   "parameter_unsharded", "cublas_workspace", "communication",
    "kv_cache"};
}  // namespace

std::string_view category_name(Category c) {
  return kCategoryNames[static_cast<size_t>(c)];
}

std::optional<Category> parse_category(std::string_view s) {
  for (size_t i = 1; i < kCategoryNames.size(); ++i) {
    if (kCategoryNames[i] == s) return static_cast<Category>(i);
  }
  return std::nullopt;
}

std::string_view owner_role_name(OwnerRole r) {
  const auto i = static_cast<size_t>(r);
  return i < kOwnerRoleNames.size() ? kOwnerRoleNames[i] : "";
}

std::optional<OwnerRole> parse_owner_role(std::string_view s) {
  for (size_t i = 1; i < kOwnerRoleNames.size(); ++i) {
    if (kOwnerRoleNames[i] == s) return static_cast<OwnerRole>(i);
  }
  return std::nullopt;
}

std::optional<EntryIndex> unknown_category_stand_in(const Snapshot& s) {
  bool any = false;
  for (const auto& tr : s.device_traces) {
    for (const auto& e : tr) {
      if (e.category == Category::kUnknown) return std::nullopt;
      any = any || e.category != Category::kNone;
    }
  }
  if (!any) return std::nullopt;
  auto first = [&](auto&& pred) -> std::optional<EntryIndex> {
    for (size_t d = 0; d < s.device_traces.size(); ++d) {
      for (size_t i = 0; i < s.device_traces[d].size(); ++i) {
        if (pred(s.device_traces[d][i])) return EntryIndex{d, i};
      }
    }
    return std::nullopt;
  };
  auto counted = [](const TraceEntry& e) { return e.action != Action::kFreeCompleted; };
  if (auto at =
          first([&](const TraceEntry& e) { return counted(e) && e.category == Category::kNone; }))
    return at;
  if (auto at = first(counted)) return at;
  return first([](const TraceEntry&) { return true; });
}

bool never_used_cuda(const Snapshot& s) {
  if (!s.segments.empty()) return false;
  for (const auto& trace : s.device_traces)
    if (!trace.empty()) return false;
  if (!s.tool) return true;
  const ToolSection& t = *s.tool;
  const bool driver_memory = std::any_of(t.driver_memory.begin(), t.driver_memory.end(),
                                         [](const DriverMemorySample& d) { return d.used_bytes; });
  return t.events_total == 0 && t.events_dropped == 0 && t.ring_error.empty() &&
         t.trace_entries_dropped == 0 && t.devices.empty() && t.vmm_handles.empty() &&
         t.imported_mappings.empty() && t.host_allocations.empty() && t.anomalies.empty() &&
         t.pool_memory.empty() && t.contexts.empty() && !driver_memory;
}

}  // namespace cumemtrace::snap
