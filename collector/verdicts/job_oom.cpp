#include "verdicts/job_oom.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/breakdown_format.h"
#include "analysis/frames.h"
#include "analysis/model.h"
#include "analysis/rank_identity.h"
#include "snapshot/size_format.h"
#include "verdicts/report.h"

namespace cumemtrace::analysis {

namespace {

// Rank order, as the rank table's rows: ranks first, then pid, then file.
std::tuple<bool, int, int, std::string> order_key(const JobOomInput& in) {
  const RankIdentity id = summary_identity(*in.summary);
  return {!id.known(), id.rank, in.summary->tool ? in.summary->tool->pid : 0, in.file};
}

}  // namespace

SnapshotLoader in_memory(const snap::Snapshot& s) {
  auto view = std::make_shared<const AnalysedSnapshot>(s);
  return [view] { return view; };
}

SnapshotLoader from_file(std::function<snap::Snapshot()> read) {
  return [read = std::move(read)] {
    return std::make_shared<const AnalysedSnapshot>(std::make_shared<const snap::Snapshot>(read()));
  };
}

std::optional<JobOom> first_job_oom(const std::vector<JobOomInput>& in) {
  std::optional<size_t> first_input;
  JobOom j;
  int64_t job_start = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < in.size(); ++i) {
    const ProcessSummary& p = *in[i].summary;
    job_start = std::min(job_start, p.time_origin_us);
    if (!p.oom_count) continue;
    j.ooms += p.oom_count;
    ++j.processes_with_oom;
    const FirstOom& v = *p.first_oom;
    const bool earlier =
        !first_input || v.time_us < j.oom.time_us ||
        (v.time_us == j.oom.time_us && order_key(in[i]) < order_key(in[*first_input]));
    if (earlier) j.oom = v, first_input = i;
  }
  if (!first_input) return std::nullopt;
  j.input = *first_input;
  const ProcessSummary& p = *in[j.input].summary;
  j.file = in[j.input].file;
  j.name = process_name(p);
  j.pid = p.tool ? p.tool->pid : 0;
  j.since_start_us = j.oom.time_us - job_start;

  std::vector<size_t> order;
  for (size_t i = 0; i < in.size(); ++i)
    if (i != j.input) order.push_back(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return order_key(in[a]) < order_key(in[b]); });
  const int64_t t = j.oom.time_us;
  for (size_t i : order) {
    const auto view = in[i].load();
    const snap::Snapshot& o = view->snapshot();
    const bool started = time_origin(o) <= t;
    const int n = device_count(o);
    for (int d = 0; d < n; ++d) {
      const DeviceReplay& rp = view->replay(d);
      const Timeline& tl = rp.timeline();
      if (!tl.highest_known().bytes) continue;  // a device it never held memory on
      HeldAtOom h;
      h.input = i;
      h.file = in[i].file;
      h.name = process_name(*in[i].summary);
      h.device = d;
      h.started = started;
      if (started) {
        const std::ptrdiff_t at = rp.index_at_time(t);
        h.bytes = rp.bytes_after(at);
        if (tl.has_reserved) {
          h.allocated = rp.allocated_after(at);
          h.reserved = rp.reserved_after(at);
        }
      }
      j.others.push_back(std::move(h));
    }
  }
  return j;
}

std::vector<std::string> job_oom_lines(const JobOom& j, size_t top) {
  std::vector<std::string> out;
  std::string more;
  if (j.ooms > 1)
    more = fmt::format(" (the first of {} in {})", plural(j.ooms, "OOM"),
                       plural(j.processes_with_oom, "process"));
  // A rank's name gets its pid; a process named by its pid ("pid 7 (app)") has it already.
  const std::string pid = fmt::format("pid {}", j.pid);
  const bool named_by_pid = j.name == pid || j.name.starts_with(pid + " ");
  out.push_back(
      fmt::format("first OOM of the job{}: {}{} on cuda:{} at {} since the job's "
                  "start: {}",
                  more, j.name, named_by_pid ? "" : fmt::format(" ({})", pid), j.oom.device,
                  format_time(j.since_start_us, 0), j.oom.line));
  out.push_back(
      fmt::format("  the request: {} at {}", snap::format_bytes(j.oom.requested), j.oom.site));
  // A large job: the `top` rows that held most, largest first; every one is in the JSON.
  std::vector<const HeldAtOom*> shown;
  for (const HeldAtOom& h : j.others) shown.push_back(&h);
  if (shown.size() > top) {
    std::stable_sort(shown.begin(), shown.end(),
                     [](const HeldAtOom* a, const HeldAtOom* b) { return a->bytes > b->bytes; });
    uint64_t rest = 0;
    for (size_t i = top; i < shown.size(); ++i) rest += shown[i]->bytes;
    out.push_back(fmt::format(
        "  the other processes then (the {} that held most of {}; the rest held {} in total):", top,
        shown.size(), snap::format_bytes(rest)));
    shown.resize(top);
  } else if (!shown.empty()) {
    out.push_back("  the other processes then:");
  }
  for (const HeldAtOom* hp : shown) {
    const HeldAtOom& h = *hp;
    if (!h.started) {
      out.push_back(fmt::format("    {} cuda:{}: not started yet", h.name, h.device));
      continue;
    }
    std::string line =
        fmt::format("    {} cuda:{}: held {}", h.name, h.device, snap::format_bytes(h.bytes));
    if (h.reserved)
      line += fmt::format(" (PyTorch allocated {}, reserved {})", snap::format_bytes(*h.allocated),
                          snap::format_bytes(*h.reserved));
    out.push_back(std::move(line));
  }
  return out;
}

nlohmann::json job_oom_json(const JobOom& j) {
  using nlohmann::json;
  json others = json::array();
  for (const HeldAtOom& h : j.others)
    others.push_back({{"file", h.file},
                      {"process", h.name},
                      {"device", h.device},
                      {"started", h.started},
                      {"bytes", h.bytes},
                      {"allocated_bytes", h.allocated ? json(*h.allocated) : json(nullptr)},
                      {"reserved_bytes", h.reserved ? json(*h.reserved) : json(nullptr)}});
  return {{"file", j.file},
          {"process", j.name},
          {"pid", j.pid},
          {"device", j.oom.device},
          {"time_us", j.oom.time_us},
          {"since_start_us", j.since_start_us},
          {"verdict", j.oom.verdict},
          {"line", j.oom.line},
          {"requested_bytes", j.oom.requested},
          {"site", j.oom.site},
          {"ooms", j.ooms},
          {"processes_with_oom", j.processes_with_oom},
          {"others", std::move(others)}};
}

}  // namespace cumemtrace::analysis
