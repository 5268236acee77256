// Contract: the project's real PyTorch 2.11 fixture (tests/fixtures/torch-2.11, recorded on a GPU
// by its record.py) for the C++ tests: the paths of PyTorch's pickle and of its newest 1,500
// entries as JSON, and facts.json, PyTorch's own counts (trace actions per kind, segments,
// memory_allocated/reserved and their maxima) that tests compare with exactly. A missing file
// throws: the fixture is part of the repository, its absence is a failure, never a skip.
#pragma once

#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace cumemtrace::testing {

inline const std::string kTorchFixtureDir = CUMEMTRACE_FIXTURES "/torch-2.11";
inline const std::string kTorchPickle = kTorchFixtureDir + "/snapshot.pickle";
inline const std::string kTorchLast1500 = kTorchFixtureDir + "/snapshot-last1500.json";

inline const nlohmann::json& torch_facts() {
  static const nlohmann::json facts = [] {
    std::ifstream in(kTorchFixtureDir + "/facts.json");
    if (!in) throw std::runtime_error("fixture " + kTorchFixtureDir + "/facts.json is missing");
    return nlohmann::json::parse(in);
  }();
  return facts;
}

}  // namespace cumemtrace::testing
