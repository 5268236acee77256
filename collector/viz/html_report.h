// Contract: renders a Snapshot as one self-contained HTML page: the aggregated ReportModel as
// embedded JSON plus the report's JS and CSS (assets/, embedded at build time). The page loads
// nothing at all (a Content-Security-Policy forbids any fetch), so it works offline and from
// file://. `source_name` is shown as the title (typically the snapshot's file name).
#pragma once

#include <string>

#include "snapshot/snapshot.h"
#include "viz/report_model.h"

namespace cumemtrace::viz {

// The page's data: the model as JSON, with '<' escaped so it can sit inside a <script> element.
std::string report_data_json(const snap::Snapshot& s, const ReportModel& m,
                             const std::string& source_name);

std::string render_html_report(const snap::Snapshot& s, const std::string& source_name,
                               const ReportOptions& opt = {});

}  // namespace cumemtrace::viz
