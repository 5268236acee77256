#include "live/context_memory.h"

#include <algorithm>

#include "live/api_names.h"
#include "live/device_ledger.h"

namespace cumemtrace::collect {

using wire::Api;
using wire::Kind;

void ContextMemory::on_context(const Record& r, int64_t t) {
  const auto& ev = r.ev;
  if (ev.kind == Kind::kContextCreated) {
    if (ev.device < 0 || ev.device >= kMaxDevices) return;
    Context c;
    c.c.device = ev.device;
    c.c.time_us = t;
    c.c.api = api_name(static_cast<uint8_t>(ev.api));
    c.c.handle = ev.aux;
    c.primary = static_cast<Api>(ev.api) == Api::kDevicePrimaryCtxRetain;
    // Two threads retaining an inactive primary context at once both see it inactive: the
    // second record names the context the first one made.
    if (c.primary && std::any_of(contexts_.begin(), contexts_.end(), [&](const Context& o) {
          return o.primary && o.c.device == c.c.device && o.c.end_time_us == 0;
        })) {
      return;
    }
    contexts_.push_back(std::move(c));
    new_context_ = ev.device;
    return;
  }
  // The newest context in being that the record names.
  const bool by_handle = static_cast<Api>(ev.api) == Api::kCtxDestroy;
  for (auto it = contexts_.rbegin(); it != contexts_.rend(); ++it) {
    snap::ContextMemory& c = it->c;
    if (c.end_time_us) continue;
    if (by_handle ? c.handle == ev.aux && !it->primary : it->primary && c.device == ev.device) {
      c.end_time_us = std::max<int64_t>(t, c.time_us + 1);
      return;
    }
  }
}

std::optional<int> ContextMemory::take_new() {
  auto d = new_context_;
  new_context_.reset();
  return d;
}

std::optional<int> ContextMemory::unmeasured_device() const {
  if (contexts_.empty() || contexts_.back().measured) return std::nullopt;
  return contexts_.back().c.device;
}

void ContextMemory::measure(uint64_t driver_used_bytes, uint64_t device_live) {
  if (contexts_.empty() || contexts_.back().measured) return;
  Context& n = contexts_.back();
  uint64_t known = device_live;
  for (size_t i = 0; i + 1 < contexts_.size(); ++i) {
    const auto& c = contexts_[i];
    if (c.measured && c.c.device == n.c.device && c.c.end_time_us == 0) known += c.c.bytes;
  }
  n.c.bytes = driver_used_bytes > known ? driver_used_bytes - known : 0;
  n.measured = true;
}

void ContextMemory::write(snap::ToolSection& tool) const {
  for (const auto& c : contexts_)
    if (c.measured) tool.contexts.push_back(c.c);
}

}  // namespace cumemtrace::collect
