// Contract: JUnit XML of a check result, the dialect Jenkins, GitLab, Azure Pipelines and the
// GitHub test-report actions display: <testsuites> / one <testsuite> per snapshot (named by its
// file and rank, CheckResult::label) / one <testcase> per limit and device (an unreadable file: one
// failed case, "readable"), with <failure message="..."> holding the stacks. Warnings are not test
// cases. Text is XML-escaped and characters XML 1.0 forbids are dropped.
#pragma once

#include <ostream>

#include "verdicts/findings.h"

namespace cumemtrace::analysis {

void write_junit(const CheckResult& r, std::ostream& out);

}  // namespace cumemtrace::analysis
