// Contract: the self-contained HTML pages, one per question, each one file: the page's data as
// embedded JSON (`page` says which page) plus the report's JS and CSS (assets/, embedded at build
// time). A page loads nothing at all (a Content-Security-Policy forbids any fetch), so it works
// offline and from file://. `source_name` is shown as the title (typically the file's name).
//  - a snapshot's report: the aggregated ReportModel, the OOM verdicts and the ledger as `report
//    --format json` writes them (pytorch_ledger, at report's default --top), and at an OOM of a
//    PyTorch run the what-if table (the recorded configuration, expandable segments and
//    max_split_size_mb:128) as `whatif --format json` writes it, or why it cannot be replayed;
//  - a job: the rank table as `report DIR --format json` writes it (ranks) and each process's
//    chart, a ReportModel of kJobBuckets buckets;
//  - a diff: `diff --format json`'s document;
//  - a what-if: `whatif --format json`'s rows and each device's budget source.
// Every number the pages show is one of those documents', so the page and the CLI cannot differ.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "pytorch/whatif.h"
#include "snapshot/snapshot.h"
#include "verdicts/diff.h"
#include "verdicts/rank_table.h"
#include "viz/report_model.h"

namespace cumemtrace::viz {

// The page's data: the model as JSON, with '<' escaped so it can sit inside a <script> element.
// `view`: the snapshot's one analysed view (analysed_snapshot.h), the model's and the ledger's.
std::string report_data_json(const analysis::AnalysedSnapshot& view, const ReportModel& m,
                             const std::string& source_name);

std::string render_html_report(const analysis::AnalysedSnapshot& view,
                               const std::string& source_name, const ReportOptions& opt = {});

// Time buckets of each process's chart on the job page (small multiples).
inline constexpr size_t kJobBuckets = 300;

// `inputs`: the table's (build_rank_table's); `unreadable`: (file, why) of files left out.
std::string render_job_html(const analysis::RankTable& table,
                            const std::vector<analysis::RankInput>& inputs,
                            const std::string& source_name, size_t skipped,
                            const std::vector<std::pair<std::string, std::string>>& unreadable,
                            size_t top);

std::string render_diff_html(const analysis::Diff& d, const std::string& source_name);

std::string render_whatif_html(const std::vector<analysis::WhatIfDevice>& r,
                               const snap::Snapshot& s, const std::string& source_name);

}  // namespace cumemtrace::viz
