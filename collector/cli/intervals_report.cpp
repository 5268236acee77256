#include "cli/intervals_report.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "snapshot/size_format.h"

namespace cumemtrace::cli {

namespace {

constexpr const char* kSuffix = ".intervals.json";

std::string bytes_or_dash(const nlohmann::json& j, const char* key) {
  return j.contains(key) ? snap::format_bytes(j.at(key).get<uint64_t>()) : std::string("-");
}

void print_text(const nlohmann::json& doc, std::ostream& out) {
  // What this process's windows hold on disk, against the cap every traced process shares.
  uint64_t on_disk = 0;
  for (const auto& w : doc.at("windows")) on_disk += w.at("bytes").get<uint64_t>();
  out << fmt::format(
      "{} (pid {}): {} intervals by {} ({} s), {} events; windows on disk {} (--max-disk {})\n",
      doc.at("exe").get<std::string>(), doc.at("pid").get<int>(), doc.at("intervals").size(),
      doc.at("by").get<std::string>(), doc.at("interval_s").get<double>(),
      doc.at("events").get<uint64_t>(), snap::format_bytes(on_disk),
      snap::format_bytes(doc.at("max_disk_bytes").get<uint64_t>()));
  out << fmt::format(
      "{:>6} {:>5} {:>9} {:>3} {:>9} {:>9} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}  {}\n", "#",
      "iters", "events", "dev", "allocs", "frees", "allocated", "freed", "live", "peak", "reserved",
      "driver", "top site");
  for (const auto& iv : doc.at("intervals")) {
    const auto& sites = iv.at("top_sites");
    const std::string top = sites.empty() ? "" : sites.front().at("site").get<std::string>();
    for (const auto& d : iv.at("devices")) {
      out << fmt::format(
          "{:>6} {:>5} {:>9} {:>3} {:>9} {:>9} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}  {}\n",
          iv.at("index").get<uint64_t>(), iv.at("iterations").get<int>(),
          iv.at("events").get<uint64_t>(), d.at("device").get<int>(),
          d.at("allocations").get<uint64_t>(), d.at("frees").get<uint64_t>(),
          bytes_or_dash(d, "bytes_allocated"), bytes_or_dash(d, "bytes_freed"),
          bytes_or_dash(d, "live_bytes"), bytes_or_dash(d, "peak_bytes"),
          bytes_or_dash(d, "torch_reserved_bytes"), bytes_or_dash(d, "driver_visible_bytes"), top);
    }
  }
  for (const auto& w : doc.at("windows")) {
    out << fmt::format("window {}: {} ({})\n", w.at("kind").get<std::string>(),
                       w.at("file").get<std::string>(),
                       snap::format_bytes(w.at("bytes").get<uint64_t>()));
  }
  for (const auto& w : doc.at("dropped")) {
    out << fmt::format("dropped {}: {} ({}): {}\n", w.at("kind").get<std::string>(),
                       w.at("file").get<std::string>(),
                       snap::format_bytes(w.at("bytes").get<uint64_t>()),
                       w.at("why").get<std::string>());
  }
}

}  // namespace

bool is_intervals_file(const std::string& path) {
  return path.size() > std::string(kSuffix).size() &&
         path.compare(path.size() - std::string(kSuffix).size(), std::string::npos, kSuffix) == 0;
}

std::vector<std::string> intervals_files_in(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    const std::string p = it->path().string();
    if (is_intervals_file(p)) out.push_back(p);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool print_intervals(const std::string& path, const std::string& format, std::ostream& out,
                     std::ostream& err) {
  std::ifstream in(path);
  if (!in) {
    err << "cumemtrace report: cannot read " << path << '\n';
    return false;
  }
  try {
    const nlohmann::json doc = nlohmann::json::parse(in);
    if (!doc.is_object() || doc.value("cumemtrace_intervals", 0) != 1) {
      throw std::runtime_error("not a cumemtrace interval summary (cumemtrace_intervals: 1)");
    }
    if (format == "json") {
      out << doc.dump(1) << '\n';
    } else {
      print_text(doc, out);
    }
  } catch (const std::exception& e) {
    err << "cumemtrace report: " << path << ": " << e.what() << '\n';
    return false;
  }
  return true;
}

}  // namespace cumemtrace::cli
