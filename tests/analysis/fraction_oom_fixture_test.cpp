// A real PyTorch 2.11 run recorded by cumemtrace under a memory fraction, with one OOM
// (tests/fixtures/torch-2.11-fraction-oom): at each marked point the engine's allocated and
// reserved bytes equal torch.cuda.memory_stats()'s there, its peaks equal PyTorch's maxima, and
// the OOM verdict's facts equal PyTorch's own OOM message and counters (issue 55, "Done when").
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "analysis/analysed_snapshot.h"
#include "analysis/frames.h"
#include "analysis/model.h"
#include "io/snapshot_input.h"
#include "pytorch/oom_verdict.h"
#include "pytorch/whatif.h"

using namespace cumemtrace;
using namespace cumemtrace::analysis;

namespace {

const std::string kDir = CUMEMTRACE_FIXTURES "/torch-2.11-fraction-oom";

nlohmann::json facts() {
  std::ifstream in(kDir + "/facts.json");
  if (!in) throw std::runtime_error(kDir + "/facts.json is missing");
  return nlohmann::json::parse(in);
}

// Read as every command reads a snapshot (cli::read_snapshot_for_views): PyTorch's blocks labelled.
snap::Snapshot read(const std::string& name) {
  snap::Snapshot s = snap::read_snapshot_any(kDir + "/" + name);
  label_block_sizes(s);
  return s;
}

// PyTorch's format_size (c10/cuda/CUDACachingAllocator.cpp), as its OOM message prints sizes.
std::string torch_format_size(uint64_t size) {
  char buf[64];
  if (size <= 1024) {
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(size));
  } else if (size <= 1048576) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", static_cast<double>(size) / 1024.0);
  } else if (size <= 1073741824ULL) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(size) / 1048576.0);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(size) / 1073741824.0);
  }
  return buf;
}

}  // namespace

TEST_CASE("fraction fixture: allocated and reserved equal memory_stats() at every marked point",
          "[fixture][blocks]") {
  const auto f = facts();
  const auto s = read("snapshot.json");
  const DeviceReplay r(s, 0);
  std::map<std::string, int64_t> marks;
  for (const auto& a : s.annotations) marks[a.name] = a.time_us;
  const auto& points = f["points"];
  REQUIRE(points.size() == 27);
  for (const auto& p : points) {
    const std::string name = "fixture:point:" + std::to_string(p["point"].get<int>());
    INFO(name << " (" << p["what"].get<std::string>() << ")");
    REQUIRE(marks.count(name) == 1);
    const auto i = r.index_at_time(marks[name]);
    CHECK(r.allocated_after(i) == p["allocated_bytes.all.current"].get<uint64_t>());
    CHECK(r.reserved_after(i) == p["reserved_bytes.all.current"].get<uint64_t>());
  }
  CHECK(r.timeline().allocated.bytes == f["max_memory_allocated"].get<uint64_t>());
  CHECK(r.timeline().reserved.bytes == f["max_memory_reserved"].get<uint64_t>());
}

TEST_CASE("fraction fixture: the OOM verdict's facts are PyTorch's message and counters",
          "[fixture][oom]") {
  const auto f = facts();
  const auto& o = f["oom"];
  const std::string msg = o["message"].get<std::string>();
  for (const std::string name : {"oom.json", "snapshot.json"}) {
    INFO(name);
    const auto s = read(name);
    const AnalysedSnapshot view(s);
    const SiteTable sites(s);
    const auto vs = oom_verdicts(view, sites);
    REQUIRE(vs.size() == 1);
    const OomVerdict& v = vs[0];
    CHECK(v.pytorch);
    CHECK(v.requested == o["request_bytes"].get<uint64_t>());
    CHECK(v.allocated == o["allocated_bytes.all.current"].get<uint64_t>());
    CHECK(v.reserved == o["reserved_bytes.all.current"].get<uint64_t>());
    // "reserved by PyTorch but unallocated" is PyTorch's inactive split bytes here.
    CHECK(v.cached_free == o["inactive_split_bytes.all.current"].get<uint64_t>());
    CHECK(v.budget == f["allowed_bytes"].get<uint64_t>());
    REQUIRE(v.fraction);
    CHECK(v.headroom == f["allowed_bytes"].get<uint64_t>() - v.reserved);
    CHECK(v.verdict == "exhaustion");
    // The message's own numbers, as PyTorch formats them.
    CHECK_THAT(msg, Catch::Contains("Tried to allocate " + torch_format_size(v.requested)));
    CHECK_THAT(msg, Catch::Contains("of which " + torch_format_size(v.device_free) + " is free"));
    CHECK_THAT(msg,
               Catch::Contains("Of the allocated memory " + torch_format_size(v.allocated) +
                               " is allocated by PyTorch, and " + torch_format_size(v.cached_free) +
                               " is reserved by PyTorch but unallocated"));
    CHECK_THAT(msg, Catch::Contains(torch_format_size(v.budget) + " allowed"));
    // Who holds it, in the ledger's own lines: a gradient by its parameter's name, never the
    // autograd node that happened to allocate it. The MLP's 2.weight is 3000 x 3000 floats.
    bool named = false;
    for (const auto& h : v.held.by_site) {
      CHECK(!(h.category == snap::Category::kGradient &&
              h.site.find("Backward0") != std::string::npos));
      if (h.site == "grad of 2.weight") named = h.bytes == 36000256;  // 3000 * 3000 * 4, in 512 B
    }
    CHECK(named);
  }
}
