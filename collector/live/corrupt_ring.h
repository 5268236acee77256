// Contract: the one error of a ring that breaks the rules (ring_reader.h: a header, record or
// clock this collector cannot read). The session that meets it ends with an error, never a crash.
// Its own header so that the ring's parts (event_clock.h) throw it without including the reader.
#pragma once

#include <stdexcept>

namespace cumemtrace::collect {

struct CorruptRing : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace cumemtrace::collect
