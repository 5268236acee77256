#include "cli/snapshot_inputs.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "io/snapshot_input.h"
#include "pytorch/whatif.h"
#include "verdicts/limits.h"

namespace cumemtrace::cli {

namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

analysis::LoadedSnapshot read_one(const std::string& path) {
  analysis::LoadedSnapshot ls;
  ls.path = path;
  try {
    ls.snapshot = read_snapshot_for_views(path);
  } catch (const snap::ReadError& e) {
    ls.unreadable = e.what();
  }
  return ls;
}

}  // namespace

snap::Snapshot read_snapshot_for_views(const std::string& path) {
  snap::Snapshot s = snap::read_snapshot_any(path);
  analysis::label_block_sizes(s);  // PyTorch's block bytes in every view
  return s;
}

SnapshotInputs read_snapshot_inputs(const std::vector<std::string>& paths,
                                    const std::function<void(analysis::LoadedSnapshot&)>& each) {
  SnapshotInputs in;
  in.many = paths.size() > 1;
  for (const auto& path : paths) {
    std::error_code ec;
    if (path == "-" || !std::filesystem::is_directory(path, ec)) {
      in.files.push_back(read_one(path));
      if (each && in.files.back().unreadable.empty()) each(in.files.back());
      continue;
    }
    in.many = true;
    std::vector<std::string> names;
    std::filesystem::directory_iterator it(path, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if ((ends_with(name, ".json") && !ends_with(name, ".perfetto.json") &&
           !ends_with(name, ".intervals.json")) ||
          ends_with(name, ".pickle"))
        names.push_back(name);
    }
    if (ec) {
      analysis::LoadedSnapshot ls;
      ls.path = path;
      ls.unreadable = fmt::format("{}: cannot list the directory: {}", path, ec.message());
      in.files.push_back(std::move(ls));
      continue;
    }
    std::sort(names.begin(), names.end());
    const size_t before = in.files.size();
    for (const auto& name : names) {
      auto ls = read_one((std::filesystem::path(path) / name).string());
      if (ls.unreadable.empty() && analysis::mid_run_snapshot(ls.snapshot)) {
        ++in.skipped;
        continue;
      }
      if (each && ls.unreadable.empty()) each(ls);
      in.files.push_back(std::move(ls));
    }
    if (in.files.size() == before) {
      analysis::LoadedSnapshot ls;
      ls.path = path;
      ls.unreadable = fmt::format(
          "{}: no snapshot (*.json, *.pickle) written at a process's end "
          "in this directory",
          path);
      in.files.push_back(std::move(ls));
    }
  }
  return in;
}

}  // namespace cumemtrace::cli
