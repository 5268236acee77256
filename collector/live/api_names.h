// Contract: the CUDA entry point's name for the api byte of a ring record (wire::Api), as the
// snapshot writes it (anomalies, host allocations, contexts); "unknown" for a value wire::Api
// does not list (the ring is untrusted input).
#pragma once

#include <cstdint>

namespace cumemtrace::collect {

const char* api_name(uint8_t api);

}  // namespace cumemtrace::collect
