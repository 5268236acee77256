// Contract: `cumemtrace diff BASE NEW` — for regression review, the change of peak and of bytes
// live at exit per device, and per allocation site (bytes a site held at its device's peak and at
// exit), sites with the largest absolute change first. Sites are matched by label
// ("function (file:line)"), so line shifts show as one site gone and one new. When both are
// PyTorch runs with automatic phases, also their ledgers (ledger.h) per device: PyTorch's
// allocated and reserved peaks, what each phase of the steady step (the first step when a run
// has no other complete one) added, matched by phase name in order ("other", "other 2"...), and
// the bytes by category at the allocated and at the reserved peak. When both carry module names,
// also the by-module view (modules.h) at `module_depth`, matched by module name: each row's
// parameters, gradients, optimizer state, activations and forward and backward peaks ("enc:
// activations"; device -1: the view sums every device).
// Devices are compared as each process used them when both snapshots are ranks of a job
// (rank_identity.h), or each used exactly one device: the k-th device A used (report.h's devices:
// those with memory or entries, most memory first: model.h's pairing_order) with the k-th device
// B used, so rank 0's cuda:0 meets rank 1's
// cuda:1 ("rank 0 cuda:0 vs rank 1 cuda:1"); otherwise device N with device N ("device N").
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "analysis/analysed_snapshot.h"
#include "snapshot/snapshot.h"

namespace cumemtrace::analysis {

struct DeviceDiff {
  int device = 0;                       // the pair's number: `device` of SiteDiff and ValueDiff
  int base_device = 0, new_device = 0;  // each side's device ordinal; -1 where a side has none
  std::string label;                    // "rank 0 cuda:0 vs rank 1 cuda:1"; empty: "device N"
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

// One number of both ledgers: `name` says which ("allocated peak", "forward",
// "allocated peak: activation"); 0 where a side lacks it.
struct ValueDiff {
  int device = 0;
  std::string name;
  int64_t base = 0, now = 0;
};

struct Diff {
  std::string base_file, new_file;
  std::vector<DeviceDiff> devices;
  std::vector<SiteDiff> sites;  // only sites whose bytes changed
  // Both PyTorch runs with automatic phases (else `ledger_note` says which lacks them).
  bool ledgers = false;
  std::string ledger_note;
  std::vector<ValueDiff> pytorch_peaks;  // "allocated peak", "reserved peak"
  std::vector<ValueDiff> phases;         // added per phase of the steady (or first) step
  std::vector<ValueDiff> categories;     // "allocated peak: activation", ...
  std::vector<ValueDiff> modules;        // "h.0: activations", ...; empty unless both have names
};

// True when nothing differs: every device's peak and live bytes, no site changed, and every
// ledger value (peaks, phases, categories) the same. The text then says "no differences" once
// instead of each number at +0 B; JSON carries "differences": false.
bool no_differences(const Diff& d);

// Each side's replays (its peaks and sites, its ledger's, its by-module view's) are its view's
// (analysed_snapshot.h: one per device).
Diff diff_snapshots(const AnalysedSnapshot& base, const std::string& base_file,
                    const AnalysedSnapshot& now, const std::string& new_file, int module_depth = 2);

void print_diff_text(const Diff& d, size_t top, std::ostream& out);
void print_diff_json(const Diff& d, std::ostream& out);

}  // namespace cumemtrace::analysis
