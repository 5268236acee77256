// DiskBudget (live/disk_budget.h): the order a bounded capture drops its windows in (requests,
// periodic, growth, peak, OOM; oldest first within a kind), that the final snapshot and the
// summaries are never dropped, that make_room() leaves room for the largest window so far, and
// that each dropped file is gone from disk and named with why.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "live/disk_budget.h"

using cumemtrace::collect::DiskBudget;
using cumemtrace::collect::DiskFile;
using cumemtrace::collect::WindowKind;

namespace {

struct Dir {
  std::filesystem::path path;
  Dir() {
    char tmpl[] = "/tmp/ct-disk-budget-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~Dir() { std::filesystem::remove_all(path); }
  // A file of `bytes` bytes, as a window written to disk.
  std::string file(const std::string& name, size_t bytes) const {
    const auto p = (path / name).string();
    std::ofstream(p) << std::string(bytes, 'x');
    return p;
  }
};

std::vector<std::string> names(const std::vector<DiskFile>& files) {
  std::vector<std::string> out;
  for (const auto& f : files) out.push_back(std::filesystem::path(f.path).filename().string());
  return out;
}

}  // namespace

TEST_CASE("a bounded capture drops the least telling windows first, oldest first within a kind") {
  Dir d;
  DiskBudget b(1000);
  // Written in this order, 100 bytes each: a mix of every kind, kinds out of drop order.
  const std::vector<std::pair<std::string, WindowKind>> written = {
      {"oom-1", WindowKind::kOom},           {"peak-1", WindowKind::kPeak},
      {"growth-1", WindowKind::kGrowth},     {"request-1", WindowKind::kRequest},
      {"periodic-1", WindowKind::kPeriodic}, {"request-2", WindowKind::kRequest},
      {"peak-2", WindowKind::kPeak},         {"growth-2", WindowKind::kGrowth},
      {"exit", WindowKind::kExit},           {"summary", WindowKind::kSummary}};
  for (const auto& [name, kind] : written) b.add(d.file(name, 100), kind, 1);
  REQUIRE(b.total() == 1000);
  REQUIRE(b.dropped().empty());

  // Each further window of 100 bytes drops exactly one, in the order of the contract.
  const std::vector<std::string> order = {"request-1", "request-2", "periodic-1", "growth-1",
                                          "growth-2",  "peak-1",    "peak-2",     "oom-1"};
  for (size_t i = 0; i < order.size(); ++i) {
    b.add(d.file("new-" + std::to_string(i), 100), WindowKind::kOom, 1);
    REQUIRE(b.total() == 1000);
  }
  REQUIRE(names(b.dropped()) == order);
  for (const auto& f : b.dropped()) {
    REQUIRE(f.why == "disk cap");
    REQUIRE_FALSE(std::filesystem::exists(f.path));
  }
  // Now only the OOM windows written last, the exit snapshot and the summary remain; the oldest
  // of the new ones goes next.
  b.add(d.file("new-8", 100), WindowKind::kOom, 1);
  REQUIRE(b.dropped().back().path == (d.path / "new-0").string());
}

TEST_CASE("the final snapshot and the summaries are never dropped, even over the cap") {
  Dir d;
  DiskBudget b(150);
  b.add(d.file("peak-1", 100), WindowKind::kPeak, 1);
  b.add(d.file("exit", 100), WindowKind::kExit, 1);
  REQUIRE(names(b.dropped()) == std::vector<std::string>{"peak-1"});
  b.add(d.file("summary", 100), WindowKind::kSummary, 1);
  REQUIRE(b.total() == 200);
  REQUIRE(b.over_cap());
  REQUIRE(names(b.kept()) == std::vector<std::string>{"exit", "summary"});
  // A summary rewritten larger is counted at its new size, not twice.
  b.add(d.file("summary", 120), WindowKind::kSummary, 1);
  REQUIRE(b.total() == 220);
  REQUIRE(b.kept().size() == 2);
}

TEST_CASE("make_room leaves room for the largest window written so far") {
  Dir d;
  DiskBudget b(1000);
  b.add(d.file("request-1", 300), WindowKind::kRequest, 1);
  b.add(d.file("peak-1", 400), WindowKind::kPeak, 1);
  b.add(d.file("request-2", 200), WindowKind::kRequest, 1);
  REQUIRE(b.total() == 900);
  // The next window may be as large as 400 bytes: 900 + 400 > 1000, so the oldest request goes;
  // 600 + 400 fits.
  b.make_room();
  REQUIRE(names(b.dropped()) == std::vector<std::string>{"request-1"});
  REQUIRE(b.total() == 600);
  // A window replaced by a higher one says so.
  b.drop((d.path / "peak-1").string(), "replaced by a higher peak");
  REQUIRE(b.dropped().back().why == "replaced by a higher peak");
  REQUIRE(b.total() == 200);
}
