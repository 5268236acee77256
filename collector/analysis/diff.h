// Contract: `cumemtrace diff BASE NEW` — for regression review, the change of peak and of bytes
// live at exit per device, and per allocation site (bytes a site held at its device's peak and at
// exit), sites with the largest absolute change first. Sites are matched by label
// ("function (file:line)"), so line shifts show as one site gone and one new.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

struct DeviceDiff {
  int device = 0;
  uint64_t base_peak = 0, new_peak = 0;
  uint64_t base_live = 0, new_live = 0;
};

struct SiteDiff {
  std::string site;
  int device = 0;
  uint64_t base_peak = 0, new_peak = 0;    // bytes live at the device's peak
  uint64_t base_live = 0, new_live = 0;    // bytes live at exit
  uint64_t base_count = 0, new_count = 0;  // allocations live at exit
};

struct Diff {
  std::string base_file, new_file;
  std::vector<DeviceDiff> devices;
  std::vector<SiteDiff> sites;  // only sites whose bytes changed
};

Diff diff_snapshots(const snap::Snapshot& base, const std::string& base_file,
                    const snap::Snapshot& now, const std::string& new_file);

void print_diff_text(const Diff& d, size_t top, std::ostream& out);
void print_diff_json(const Diff& d, std::ostream& out);

}  // namespace cumemtrace::analysis
