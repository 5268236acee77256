#include "cli/one_output.h"

#include <fmt/format.h>

#include "cli/snapshot_inputs.h"
#include "io/snapshot_input.h"

namespace cumemtrace::cli {

std::optional<snap::Snapshot> read_for_output(std::string_view command, const std::string& input,
                                              const std::string& output,
                                              const io::OutputPolicy& policy) {
  if (auto problem = io::output_problem(output, policy); !problem.empty()) {
    fmt::print(stderr, "cumemtrace {}: {}\n", command, problem);
    return std::nullopt;
  }
  try {
    return read_snapshot_for_views(input);
  } catch (const snap::ReadError& e) {
    fmt::print(stderr, "cumemtrace {}: {}\n", command, e.what());
    return std::nullopt;
  }
}

}  // namespace cumemtrace::cli
