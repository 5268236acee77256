// Contract: GitHub Actions workflow commands for a check result: `::error file=F,line=L,
// title=T::MESSAGE` per failure and `::warning ...` per warning, pointing at the allocation
// site's source file and line when the stack has one, else at the snapshot file; paths under
// $GITHUB_WORKSPACE are made relative to it, as annotations require. The message
// carries the stack on following lines (%0A-encoded, as the runner requires).
#pragma once

#include <ostream>

#include "verdicts/findings.h"

namespace cumemtrace::analysis {

void write_github(const CheckResult& r, std::ostream& out);

}  // namespace cumemtrace::analysis
