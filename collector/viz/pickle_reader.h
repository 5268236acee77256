// Contract: reads the pickles PyTorch writes for memory snapshots (`_dump_snapshot`, protocols
// 2 to 5, and ours) into a JSON value, so `cumemtrace html/convert` take a PyTorch .pickle as it
// is and hand it to the strict snapshot reader. Only the plain-data opcodes such pickles use are
// understood (dicts, lists, tuples as lists, str, int, float, bool, None, memo); anything else
// (classes, bytes, persistent ids) is an error. Never crashes on bad input: every problem is a
// std::runtime_error "pickle offset N: what". Shared objects (memoized frame lists) are copied,
// so the JSON can be several times the pickle's size.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace cumemtrace::viz {

bool looks_like_pickle(std::string_view bytes);
nlohmann::json unpickle(std::string_view bytes);

}  // namespace cumemtrace::viz
