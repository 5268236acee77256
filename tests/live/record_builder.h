// Test helper: ring records as the ring reader decodes them, for feeding one tracker directly.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "live/ring_reader.h"

namespace cumemtrace::test {

inline collect::Record record(wire::Kind k, wire::Api api, uint64_t addr, uint64_t size,
                              int device = 0, uint64_t aux = 0, uint32_t tid = 7) {
  collect::Record r;
  r.ev.kind = k;
  r.ev.api = api;
  r.ev.addr = addr;
  r.ev.size = size;
  r.ev.device = static_cast<int16_t>(device);
  r.ev.aux = aux;
  r.ev.tid = tid;
  return r;
}

inline collect::Record torch_record(wire::TorchAction a, uint64_t addr, uint64_t size,
                                    int device = 0) {
  return record(wire::Kind::kTorchBlock, wire::Api::kNone, addr, size, device,
                static_cast<uint64_t>(a));
}

}  // namespace cumemtrace::test
