// Contract: a minimal, lenient reader of snapshot JSON (cumemtrace's or PyTorch's) into
// snap::Snapshot, through nlohmann::json's DOM. It exists only so `html` and `convert` work on a
// tree that lacks the project's strict streaming reader (collector/snapshot_reader.h); where that
// reader exists, viz/snapshot_input.h uses it instead. Missing keys take their defaults, unknown
// actions are skipped, identical frame lists are interned once. Throws std::runtime_error with
// a one-line message naming the input on anything that is not a snapshot object.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "snapshot.h"

namespace cumemtrace::viz {

snap::Snapshot snapshot_from_json(const nlohmann::json& j, const std::string& name);
snap::Snapshot load_snapshot_json_file(const std::string& path);

}  // namespace cumemtrace::viz
