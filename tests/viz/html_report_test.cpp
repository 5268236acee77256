#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "support/sample_snapshots.h"
#include "viz/html_report.h"

using namespace cumemtrace;
using namespace cumemtrace::viz;
using nlohmann::json;

namespace {

json embedded_data(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"cumemtrace-data\">";
  const auto a = page.find(open);
  REQUIRE(a != std::string::npos);
  const auto b = page.find("</script>", a);
  REQUIRE(b != std::string::npos);
  return json::parse(page.substr(a + open.size(), b - a - open.size()));
}

}  // namespace

TEST_CASE("the report is one offline page with the data embedded") {
  const std::string page = render_html_report(testing::leak_snapshot(), "leak.json");
  REQUIRE(page.rfind("<!DOCTYPE html>", 0) == 0);
  REQUIRE(page.find("Content-Security-Policy") != std::string::npos);
  REQUIRE(page.find("default-src 'none'") != std::string::npos);
  // Nothing that would load from anywhere.
  for (const char* ref : {"<script src", "<link", "@import", "url(", "https://", "<img"})
    REQUIRE(page.find(ref) == std::string::npos);
  const json d = embedded_data(page);
  REQUIRE(d["source"] == "leak.json");
  REQUIRE(d["devices"].size() == 1);
  const auto& dev = d["devices"][0];
  REQUIRE(dev["peak"]["bytes"] == 7u << 20);
  REQUIRE(dev["at_exit"]["groups"][0]["site"] == "leaky_cache_grow(...) (cache.cpp:42)");
  const int stack = dev["at_exit"]["groups"][0]["stacks"][0][0];
  REQUIRE(d["stacks"][std::to_string(stack)][0][0] == "leaky_cache_grow(unsigned long)");
  REQUIRE(dev["series"].size() == dev["points"]["v"].size());
  REQUIRE(dev["points"]["x"].size() == dev["points"]["total"].size());
  REQUIRE(dev["bands"][0][2] == "step");
  REQUIRE(dev["ooms"].size() == 1);
  REQUIRE(d["tool"].is_null());
  // The JS and CSS are inlined.
  REQUIRE(page.find("cumemtrace-data") != page.rfind("cumemtrace-data"));
  REQUIRE(page.find("svg.chart") != std::string::npos);
}

TEST_CASE("names that look like markup cannot break out of the data element") {
  auto s = testing::leak_snapshot();
  // A Python frame: its name is shown as recorded, not folded like a C++ name.
  s.stacks[1][0].name = "evil</script><script>alert(1)</script><!--";
  s.stacks[1][0].filename = "cache.py";
  const std::string page = render_html_report(s, "x</title><b>.json");
  REQUIRE(page.find("alert(1)</script>") == std::string::npos);
  REQUIRE(page.find("<title>cumemtrace: x&lt;/title&gt;&lt;b&gt;.json</title>") !=
          std::string::npos);
  const json d = embedded_data(page);
  REQUIRE(d["devices"][0]["at_exit"]["groups"][0]["site"] ==
          "evil</script><script>alert(1)</script><!-- (cache.py:42)");
}

TEST_CASE("the report carries the tool section when there is one") {
  const std::string page = render_html_report(testing::busy_snapshot(100, 3), "busy.json");
  const json d = embedded_data(page);
  REQUIRE(d["tool"]["pid"] == 4242);
  REQUIRE(d["tool"]["anomalies"] == 1);
  REQUIRE(d["devices"].size() == 2);
}

TEST_CASE("the job page charts every process of a small job, a large one's shown in detail") {
  // html_report.h kJobChartsAll: html DIR over 1,024 ranks reads the snapshots of the processes
  // it shows in detail (a flagged row, its median row, the first OOM's process), not every one.
  auto table_of = [](size_t n) {
    cumemtrace::analysis::RankTable t;
    for (size_t k = 0; k < n; ++k) {
      cumemtrace::analysis::RankProcess p;
      p.file = "r" + std::to_string(k) + ".json";
      t.processes.push_back(p);
      cumemtrace::analysis::RankRow row;
      row.process = k;
      t.rows.push_back(row);
    }
    return t;
  };
  auto small = table_of(cumemtrace::viz::kJobChartsAll);
  small.rows[3].flagged = {0};
  CHECK(cumemtrace::viz::charted_processes(small).size() == cumemtrace::viz::kJobChartsAll);
  auto large = table_of(cumemtrace::viz::kJobChartsAll + 1);
  CHECK(cumemtrace::viz::charted_processes(large).empty());
  large.rows[5].flagged = {0};
  large.rows[5].median_row = 2;
  cumemtrace::analysis::JobOom oom;
  oom.file = "r12.json";
  large.first_oom = oom;
  CHECK(cumemtrace::viz::charted_processes(large) == std::vector<size_t>{2, 5, 12});
}
