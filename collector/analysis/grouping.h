// Contract: aggregation of allocations by allocation site (innermost program frame) and by whole
// call stack, sorted largest first (bytes, then count, then label for a stable order), and the
// allocation-size histogram. Shared by report, check and diff so they always agree.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analysis/frames.h"
#include "analysis/model.h"

namespace cumemtrace::analysis {

struct SiteStat {
  std::string site;
  uint64_t count = 0;
  uint64_t bytes = 0;
  int32_t stack = snap::kNoStack;  // one stack of this site, to show its outer frames
};

struct StackGroup {
  int32_t stack = snap::kNoStack;
  bool before_trace = false;
  uint64_t count = 0;
  uint64_t bytes = 0;
};

// Label of an allocation: its site, or the before-trace marker when its stack is unknown.
const std::string& site_label(const Allocation& a, const SiteTable& sites);

std::vector<SiteStat> by_site(const std::vector<Allocation>& allocs, const SiteTable& sites);
std::vector<StackGroup> by_stack(const std::vector<Allocation>& allocs);

// Every request (model.h is_request) of every device trace, by site; sorted by bytes, or by count
// when `by_count`.
std::vector<SiteStat> trace_alloc_sites(const snap::Snapshot& s, const SiteTable& sites,
                                        bool by_count);

struct SizeBucket {
  uint64_t low = 0;   // inclusive
  uint64_t high = 0;  // exclusive; 0 = unbounded
  uint64_t count = 0;
  uint64_t bytes = 0;
};
// Power-of-two buckets over requests (model.h is_request); only non-empty buckets are returned.
std::vector<SizeBucket> size_histogram(const snap::Snapshot& s);

uint64_t total_bytes(const std::vector<Allocation>& allocs);

}  // namespace cumemtrace::analysis
