#include "verdicts/rank_table.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "analysis/breakdown_format.h"
#include "pytorch/phases.h"
#include "snapshot/size_format.h"

namespace cumemtrace::analysis {

using snap::format_bytes;
using snap::format_signed_bytes;

namespace {

// The fixed columns, in this order; categories follow.
enum Column : size_t { kPeak, kAllocated, kReserved, kDriver, kContext, kOther, kFixed };
constexpr const char* kColumnNames[kFixed] = {"peak",          "allocated peak",
                                              "reserved peak", "driver-visible peak",
                                              "CUDA context",  "other libraries"};

uint64_t distance(uint64_t a, uint64_t b) {
  return a > b ? a - b : b - a;
}

bool differs(uint64_t v, uint64_t median, const RankThresholds& t) {
  const uint64_t d = distance(v, median);
  return d > t.bytes && static_cast<double>(d) > t.share * static_cast<double>(median);
}

std::vector<std::optional<uint64_t>> row_values(const DeviceSummary& d,
                                                const std::vector<snap::Category>& categories) {
  std::vector<std::optional<uint64_t>> v(kFixed + categories.size());
  v[kPeak] = d.peak_bytes;
  v[kAllocated] = d.allocated_peak_bytes;
  v[kReserved] = d.reserved_peak_bytes;
  v[kDriver] = d.driver_peak_bytes;
  v[kContext] = d.context_bytes;
  v[kOther] = d.other_libraries;
  if (d.has_ledger) {
    for (size_t k = 0; k < categories.size(); ++k) {
      v[kFixed + k] = 0;
      for (const auto& [name, bytes] : d.categories)
        if (snap::parse_category(name) == categories[k] && bytes > 0) v[kFixed + k] = bytes;
    }
  }
  return v;
}

// The bytes of a column's series after entry `index` (model.h).
uint64_t measured(const DeviceReplay& rp, size_t column, std::ptrdiff_t index) {
  if (column == kAllocated) return rp.allocated_after(index);
  if (column == kReserved) return rp.reserved_after(index);
  return rp.bytes_after(index);
}

std::optional<Divergence> find_divergence(const AnalysedSnapshot& va, int dev_a,
                                          const AnalysedSnapshot& vb, int dev_b, size_t column,
                                          bool above, const RankThresholds& t) {
  const snap::Snapshot &a = va.snapshot(), &b = vb.snapshot();
  const DeviceReplay &ra = va.replay(dev_a), &rb = vb.replay(dev_b);
  // Only a difference the same way as the flagged one counts (a rank that holds more is not
  // "diverging" where it merely started later).
  auto apart = [&](uint64_t v, uint64_t median) {
    return (v > median) == above && differs(v, median, t);
  };
  Divergence d;
  d.measure = kColumnNames[column];
  const int64_t oa = time_origin(a), ob = time_origin(b);
  auto at = [&](int64_t since_start, std::optional<int> step) -> bool {
    const std::ptrdiff_t ia = ra.index_at_time(oa + since_start);
    const uint64_t va = measured(ra, column, ia);
    const uint64_t vb = measured(rb, column, rb.index_at_time(ob + since_start));
    if (!apart(va, vb)) return false;
    d.step = step;
    d.time_us = oa + since_start;
    d.since_start_us = since_start;
    d.bytes = va;
    d.median_bytes = vb;
    return true;
  };
  // Automatic steps: compare the ends of the same step (its last microsecond, as check does).
  const Phases &pa = phases_of(va), &pb = phases_of(vb);
  if (pa.training() && pb.training()) {
    const auto& sa = pa.steps();
    const auto& sb = pb.steps();
    for (size_t k = 0; k < sa.size() && k < sb.size() && sa[k].complete && sb[k].complete; ++k) {
      const std::ptrdiff_t ia = ra.index_at_time(sa[k].end_us - 1);
      const uint64_t va = measured(ra, column, ia);
      const uint64_t vb = measured(rb, column, rb.index_at_time(sb[k].end_us - 1));
      if (!apart(va, vb)) continue;
      d.step = static_cast<int>(k) + 1;
      d.time_us = sa[k].end_us - 1;
      d.since_start_us = d.time_us - oa;
      d.bytes = va;
      d.median_bytes = vb;
      return d;
    }
  }
  // Else the first moment, in time since each process's start, where they differ.
  std::vector<int64_t> moments;
  for (const auto& e : ra.trace()) moments.push_back(e.time_us - oa);
  for (const auto& e : rb.trace()) moments.push_back(e.time_us - ob);
  std::sort(moments.begin(), moments.end());
  moments.erase(std::unique(moments.begin(), moments.end()), moments.end());
  for (int64_t m : moments)
    if (at(m, std::nullopt)) return d;
  return std::nullopt;
}

std::vector<SiteChange> site_changes(const DeviceReport& row, const DeviceReport& median) {
  std::map<std::string, SiteChange> by_site;
  for (const auto& s : row.at_peak) {
    auto& c = by_site[s.site];
    c.site = s.site;
    c.bytes += static_cast<int64_t>(s.bytes);
    c.stack = s.stack;
  }
  for (const auto& s : median.at_peak) {
    auto& c = by_site[s.site];
    c.site = s.site;
    c.median_bytes += static_cast<int64_t>(s.bytes);
    if (c.stack == snap::kNoStack) c.stack = s.stack;
  }
  // PyTorch's cache is its own line (model.h Attributed), never a site's.
  if (row.at_peak_cached || median.at_peak_cached) {
    auto& c = by_site[kCachedFreeLabel];
    c.site = kCachedFreeLabel;
    c.bytes = static_cast<int64_t>(row.at_peak_cached.value_or(0));
    c.median_bytes = static_cast<int64_t>(median.at_peak_cached.value_or(0));
  }
  std::vector<SiteChange> out;
  for (auto& [site, c] : by_site)
    if (c.bytes != c.median_bytes) out.push_back(std::move(c));
  std::stable_sort(out.begin(), out.end(), [](const SiteChange& x, const SiteChange& y) {
    return distance(static_cast<uint64_t>(x.bytes), static_cast<uint64_t>(x.median_bytes)) >
           distance(static_cast<uint64_t>(y.bytes), static_cast<uint64_t>(y.median_bytes));
  });
  return out;
}

std::string percent(uint64_t v, uint64_t median) {
  if (!median) return {};
  const double p =
      100.0 * (static_cast<double>(v) - static_cast<double>(median)) / static_cast<double>(median);
  return fmt::format(" ({:+.1f}%)", p);
}

std::string device_name(int device) {
  return fmt::format("cuda:{}", device);
}

}  // namespace

RankTable build_rank_table(const std::vector<RankInput>& inputs, const RankThresholds& t,
                           const RankOptions& opts) {
  RankTable table;
  table.thresholds = t;
  auto pid_of = [&](size_t i) {
    return inputs[i].summary->tool ? inputs[i].summary->tool->pid : 0;
  };
  // Processes by job (those without a job id after the jobs), then rank, then pid (those without
  // a rank after the ranks), then file name.
  std::vector<size_t> order(inputs.size());
  std::iota(order.begin(), order.end(), 0);
  auto key = [&](size_t i) {
    const RankIdentity id = summary_identity(*inputs[i].summary);
    return std::make_tuple(id.job.empty(), id.job, !id.known(), id.rank, pid_of(i), inputs[i].file);
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  // Two jobs in one folder: their ids, and a rank claimed by two processes within one id (two
  // runs of a job without an id, or with the same one). One process's images (exec) are one.
  std::map<std::pair<std::string, int>, std::set<int>> claims;
  for (size_t i : order) {
    const RankIdentity id = summary_identity(*inputs[i].summary);
    if (!id.job.empty() &&
        std::find(table.jobs.begin(), table.jobs.end(), id.job) == table.jobs.end())
      table.jobs.push_back(id.job);
    auto& pids = claims[{id.job, id.rank}];
    if (id.known() && pids.insert(pid_of(i)).second && pids.size() == 2)
      table.repeated_ranks.push_back(id.rank);
  }
  std::sort(table.repeated_ranks.begin(), table.repeated_ranks.end());
  table.repeated_ranks.erase(std::unique(table.repeated_ranks.begin(), table.repeated_ranks.end()),
                             table.repeated_ranks.end());

  // Category columns: every category any process's ledger has at its allocated peak.
  std::vector<snap::Category> categories;
  for (const auto& in : inputs)
    for (const auto& d : in.summary->devices)
      for (const auto& [name, bytes] : d.categories)
        if (const auto c = snap::parse_category(name);
            c && std::find(categories.begin(), categories.end(), *c) == categories.end())
          categories.push_back(*c);
  std::sort(categories.begin(), categories.end());
  table.columns.assign(std::begin(kColumnNames), std::end(kColumnNames));
  for (auto c : categories) table.columns.push_back(category_label(c));

  std::vector<size_t> row_input;  // by row: its input
  for (size_t i : order) {
    const RankInput& in = inputs[i];
    const ProcessSummary& ps = *in.summary;
    RankProcess p;
    p.file = in.file;
    p.id = summary_identity(ps);
    if (ps.tool) p.pid = ps.tool->pid, p.exe = ps.tool->exe;
    p.name = process_name(ps);
    if (table.jobs.size() > 1 && !p.id.job.empty()) p.name += fmt::format(" [job {}]", p.id.job);
    table.processes.push_back(std::move(p));
    // Slots in model.h's pairing_order: a rank's own device is its slot 0.
    std::vector<std::pair<int, uint64_t>> peaks;
    for (const auto& d : ps.devices) peaks.emplace_back(d.device, d.peak_bytes);
    size_t slot = 0;
    for (int device : pairing_order(std::move(peaks))) {
      const auto& d = *std::find_if(ps.devices.begin(), ps.devices.end(),
                                    [&](const auto& x) { return x.device == device; });
      RankRow row;
      row.process = table.processes.size() - 1;
      row.device = d.device;
      row.slot = slot++;
      row.values = row_values(d, categories);
      row.live_at_exit = d.live_at_exit_bytes;
      row.ooms = d.ooms;
      table.rows.push_back(std::move(row));
      row_input.push_back(i);
    }
  }

  std::vector<JobOomInput> ooms;
  for (const auto& in : inputs) ooms.push_back({in.file, in.summary, in.load});
  table.first_oom = first_job_oom(ooms);

  // A row shown in detail: its analysed snapshot and the report of it (the lines live at its
  // peak), both from the one view: its devices replayed once for the report and the divergence.
  struct Detail {
    std::shared_ptr<const AnalysedSnapshot> view;
    std::shared_ptr<const Report> report;
  };
  auto detail = [&](size_t input) {
    const RankInput& in = inputs[input];
    Detail d;
    d.view = in.load();
    if (in.report) {
      d.report = std::shared_ptr<const Report>(in.report, [](const Report*) {});
    } else {
      const SiteTable sites(d.view->snapshot(), opts.full_names);
      d.report = std::make_shared<const Report>(build_report(*d.view, sites, in.file));
    }
    return d;
  };
  auto device_of = [](const Report& r, int device) -> const DeviceReport& {
    return *std::find_if(r.devices.begin(), r.devices.end(),
                         [&](const DeviceReport& x) { return x.timeline.device == device; });
  };

  size_t slots = 0;
  for (const auto& r : table.rows) slots = std::max(slots, r.slot + 1);
  table.medians.assign(slots, std::vector<std::optional<uint64_t>>(table.columns.size()));
  std::optional<Detail> median_full;  // the median row's, while it is compared
  size_t median_full_row = 0;
  for (size_t s = 0; s < slots; ++s) {
    std::vector<size_t> members;
    for (size_t i = 0; i < table.rows.size(); ++i)
      if (table.rows[i].slot == s) members.push_back(i);
    if (members.size() < 2) continue;
    for (size_t c = 0; c < table.columns.size(); ++c) {
      std::vector<uint64_t> v;
      for (size_t i : members)
        if (table.rows[i].values[c]) v.push_back(*table.rows[i].values[c]);
      if (v.size() < 2) continue;
      std::sort(v.begin(), v.end());
      table.medians[s][c] = v[(v.size() - 1) / 2];
    }
    // The median row: the first (in rank order) whose peak is the median peak.
    size_t median_row = members.front();
    for (size_t i : members)
      if (table.rows[i].values[kPeak] == table.medians[s][kPeak]) {
        median_row = i;
        break;
      }
    for (size_t i : members) {
      RankRow& row = table.rows[i];
      for (size_t c = 0; c < table.columns.size(); ++c)
        if (row.values[c] && table.medians[s][c] &&
            differs(*row.values[c], *table.medians[s][c], t))
          row.flagged.push_back(c);
      if (row.flagged.empty() || i == median_row) continue;
      row.median_row = median_row;
      size_t measure = kPeak;
      for (size_t c : row.flagged)
        if (c == kPeak || c == kAllocated || c == kReserved) {
          measure = c;
          break;
        }
      const bool above = *row.values[measure] > *table.medians[s][measure];
      // The two full snapshots, read where the inputs hold only their summaries.
      if (!median_full || median_full_row != median_row) {
        median_full = detail(row_input[median_row]);
        median_full_row = median_row;
      }
      const Detail row_full = detail(row_input[i]);
      const int median_device = table.rows[median_row].device;
      row.divergence = find_divergence(*row_full.view, row.device, *median_full->view,
                                       median_device, measure, above, t);
      row.lines = site_changes(device_of(*row_full.report, row.device),
                               device_of(*median_full->report, median_device));
    }
  }
  return table;
}

void print_rank_table_text(const RankTable& t, size_t top, std::ostream& out) {
  const std::string rule = fmt::format("more than {:g}% and {} from the median",
                                       t.thresholds.share * 100, format_bytes(t.thresholds.bytes));
  // Only the columns some row has.
  std::vector<size_t> shown;
  for (size_t c = 0; c < t.columns.size(); ++c)
    for (const auto& r : t.rows)
      if (r.values[c]) {
        shown.push_back(c);
        break;
      }
  if (t.jobs.size() > 1) {
    std::string ids;
    for (const auto& j : t.jobs) ids += (ids.empty() ? "" : ", ") + j;
    out << fmt::format("\nThis folder holds {} jobs ({}); each process is named with its job.\n",
                       t.jobs.size(), ids);
  }
  if (!t.repeated_ranks.empty()) {
    std::string ranks;
    for (int r : t.repeated_ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    out << fmt::format(
        "\n{} {} {} claimed by more than one process of one job: two runs share this folder "
        "(give one run's files, or an output folder per run).\n",
        t.repeated_ranks.size() > 1 ? "Ranks" : "Rank", ranks,
        t.repeated_ranks.size() > 1 ? "are" : "is");
  }
  if (t.first_oom) {
    out << '\n';
    bool head = true;
    for (std::string line : job_oom_lines(*t.first_oom, top)) {
      if (head && !line.empty()) line[0] = 'F';  // "first OOM of the job" starts a paragraph
      head = false;
      out << line << '\n';
    }
  }
  // Besides the compared columns: the OOMs on each device (when the job had any) and what was
  // live at the end, neither with a median.
  const bool any_oom =
      std::any_of(t.rows.begin(), t.rows.end(), [](const RankRow& r) { return r.ooms > 0; });
  size_t name_w = std::string_view("process").size();
  for (const auto& p : t.processes) name_w = std::max(name_w, p.name.size());
  out << fmt::format("\nProcesses, each device at its own peak (* = {}):\n", rule);
  std::string head = fmt::format("  {:<{}}  {:<7}", "process", name_w, "device");
  for (size_t c : shown)
    head += fmt::format("  {:>{}}", t.columns[c], std::max<size_t>(t.columns[c].size(), 12));
  if (any_oom) head += fmt::format("  {:>4}", "OOMs");
  head += fmt::format("  {:>12}", "live at exit");
  out << head << '\n';
  auto cells = [&](const std::vector<std::optional<uint64_t>>& v,
                   const std::vector<size_t>& flags) {
    std::string s;
    for (size_t c : shown) {
      const bool flag = std::find(flags.begin(), flags.end(), c) != flags.end();
      const std::string cell = v[c] ? format_bytes(*v[c]) + (flag ? " *" : "  ") : "-  ";
      s += fmt::format("  {:>{}}", cell, std::max<size_t>(t.columns[c].size(), 12));
    }
    return s;
  };
  for (const auto& r : t.rows) {
    const auto& p = t.processes[r.process];
    out << fmt::format("  {:<{}}  {:<7}", r.slot ? "" : p.name, name_w, device_name(r.device))
        << cells(r.values, r.flagged);
    if (any_oom) out << fmt::format("  {:>4}", r.ooms);
    out << fmt::format("  {:>12}", format_bytes(r.live_at_exit)) << '\n';
  }
  for (size_t s = 0; s < t.medians.size(); ++s) {
    bool any = false;
    for (const auto& m : t.medians[s]) any = any || m.has_value();
    if (!any) continue;
    out << fmt::format("  {:<{}}  {:<7}", "median", name_w,
                       t.medians.size() > 1 ? fmt::format("#{}", s + 1) : "")
        << cells(t.medians[s], {}) << '\n';
  }

  bool flagged = false;
  for (const auto& r : t.rows) {
    if (r.flagged.empty()) continue;
    flagged = true;
    const auto& p = t.processes[r.process];
    out << fmt::format("\n{}, {}:\n", p.name, device_name(r.device));
    for (size_t c : r.flagged) {
      const uint64_t v = *r.values[c], m = *t.medians[r.slot][c];
      out << fmt::format("  {} {}: {}{} from the median {}\n", t.columns[c], format_bytes(v),
                         format_signed_bytes(static_cast<int64_t>(v - m)), percent(v, m),
                         format_bytes(m));
    }
    if (!r.median_row) {
      out << "  (it is the median process of its peak; the others differ from it)\n";
      continue;
    }
    const auto& med = t.rows[*r.median_row];
    const std::string med_name =
        fmt::format("{} {}", t.processes[med.process].name, device_name(med.device));
    if (r.divergence) {
      const auto& d = *r.divergence;
      const std::string when =
          d.step
              ? fmt::format("at the end of step {} ({})", *d.step, format_time(d.since_start_us, 0))
              : fmt::format("at {} since its start", format_time(d.since_start_us, 0));
      out << fmt::format("  first diverges {}: {} {} vs {} on {}\n", when, d.measure,
                         format_bytes(d.bytes), format_bytes(d.median_bytes), med_name);
    } else {
      out << fmt::format("  no single moment where it diverges from {} by {}\n", med_name, rule);
    }
    out << fmt::format("  the lines that make the difference (live at its peak, minus {}'s):\n",
                       med_name);
    for (size_t i = 0; i < r.lines.size() && i < top; ++i) {
      const auto& l = r.lines[i];
      out << fmt::format("    {:>12}  {} ({} vs {})\n",
                         format_signed_bytes(wrap_sub(l.bytes, l.median_bytes)), l.site,
                         format_bytes(static_cast<uint64_t>(l.bytes)),
                         format_bytes(static_cast<uint64_t>(l.median_bytes)));
    }
    if (r.lines.size() > top)
      out << fmt::format("    ... {} more\n", plural(r.lines.size() - top, "line"));
  }
  if (!flagged) out << fmt::format("\nNo process differs {}.\n", rule);
}

nlohmann::json rank_table_json(const RankTable& t, size_t top) {
  using nlohmann::json;
  auto values = [&](const std::vector<std::optional<uint64_t>>& v) {
    json o = json::object();
    for (size_t c = 0; c < t.columns.size(); ++c)
      o[t.columns[c]] = v[c] ? json(*v[c]) : json(nullptr);
    return o;
  };
  json rows = json::array();
  for (const auto& r : t.rows) {
    const auto& p = t.processes[r.process];
    json row = {{"file", p.file},
                {"process", p.name},
                {"rank", p.id.known() ? json(p.id.rank) : json(nullptr)},
                {"local_rank", p.id.local_rank >= 0 ? json(p.id.local_rank) : json(nullptr)},
                {"world_size", p.id.world_size > 0 ? json(p.id.world_size) : json(nullptr)},
                {"launcher", p.id.launcher},
                {"host", p.id.host},
                {"pid", p.pid},
                {"device", r.device},
                {"slot", r.slot},
                {"values", values(r.values)},
                {"job", p.id.job.empty() ? json(nullptr) : json(p.id.job)},
                {"node", p.id.node >= 0 ? json(p.id.node) : json(nullptr)},
                {"ooms", r.ooms},
                {"live_at_exit_bytes", r.live_at_exit}};
    json flagged = json::array();
    for (size_t c : r.flagged) flagged.push_back(t.columns[c]);
    row["flagged"] = std::move(flagged);
    row["median_process"] =
        r.median_row ? json(t.processes[t.rows[*r.median_row].process].name) : json(nullptr);
    if (r.divergence) {
      const auto& d = *r.divergence;
      row["divergence"] = {{"step", d.step ? json(*d.step) : json(nullptr)},
                           {"time_us", d.time_us},
                           {"since_start_us", d.since_start_us},
                           {"measure", d.measure},
                           {"bytes", d.bytes},
                           {"median_bytes", d.median_bytes}};
    } else {
      row["divergence"] = nullptr;
    }
    json lines = json::array();
    for (size_t i = 0; i < r.lines.size() && i < top; ++i)
      lines.push_back({{"site", r.lines[i].site},
                       {"bytes", r.lines[i].bytes},
                       {"median_bytes", r.lines[i].median_bytes},
                       {"change_bytes", wrap_sub(r.lines[i].bytes, r.lines[i].median_bytes)}});
    row["lines"] = std::move(lines);
    rows.push_back(std::move(row));
  }
  json medians = json::array();
  for (const auto& m : t.medians) medians.push_back(values(m));
  return {{"thresholds", {{"share", t.thresholds.share}, {"bytes", t.thresholds.bytes}}},
          {"columns", t.columns},
          {"rows", std::move(rows)},
          {"medians", std::move(medians)},
          {"first_oom", t.first_oom ? job_oom_json(*t.first_oom) : json(nullptr)},
          {"jobs", t.jobs},
          {"repeated_ranks", t.repeated_ranks}};
}

}  // namespace cumemtrace::analysis
