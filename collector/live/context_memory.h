// Contract: the CUDA contexts of one traced process (kContextCreated / kContextDestroyed), kept in
// order of creation. The owner measures each new one right after adding its record (take_new()
// then measure()), and only measured ones are written (tool section's contexts). A cuCtxDestroy
// ends the context of its handle, a primary context's last release or reset the in-being primary
// context of its device; a primary context's creation while one is in being on the device (two
// threads raced) is the same one.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "live/ring_reader.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::collect {

class ContextMemory {
 public:
  void on_context(const Record& r, int64_t t);
  // The device of the context whose creation was the record just added, if it was one (cleared
  // by the call).
  std::optional<int> take_new();
  // The newest context's cost: the process's memory on its device as the driver reports it now,
  // less what was known there already (device_live: the ledger's live bytes on that device, and
  // the contexts in being measured before).
  void measure(uint64_t driver_used_bytes, uint64_t device_live);
  // The device of the newest context, if any is unmeasured.
  std::optional<int> unmeasured_device() const;
  void write(snap::ToolSection& tool) const;

 private:
  struct Context {
    snap::ContextMemory c;
    bool primary = false;  // a device's primary context (else cuCtxCreate'd)
    bool measured = false;
  };
  std::vector<Context> contexts_;
  std::optional<int> new_context_;
};

}  // namespace cumemtrace::collect
