#include "cli/check_options.h"

#include "cli/cli_checks.h"
#include "snapshot/size_format.h"

namespace cumemtrace::cli {

namespace {

void add_size_option(CLI::App* app, const std::string& name, std::optional<uint64_t>& target,
                     const std::string& help) {
  app->add_option_function<std::string>(
         name,
         [&target, name](const std::string& v) {
           auto b = snap::parse_bytes(v);
           if (!b) {
             throw CLI::ValidationError(
                 name, "expected a size such as 0, 4096, 12MiB or 1.5GB, got '" + v + "'");
           }
           target = *b;
         },
         help)
      ->type_name("SIZE");
}

}  // namespace

void add_check_options(CLI::App* app, analysis::CheckOptions& o) {
  add_size_option(app, "--max-leaked-bytes", o.max_leaked_bytes,
                  "Fail when more than SIZE bytes are live at exit on a device");
  add_size_option(app, "--max-peak-bytes", o.max_peak_bytes,
                  "Fail when a device's peak exceeds SIZE bytes");
  add_size_option(app, "--max-allocated-peak", o.max_allocated_peak,
                  "Fail when PyTorch's allocated bytes on a device peak above SIZE");
  add_size_option(
      app, "--max-reserved-peak", o.max_reserved_peak,
      "Fail when PyTorch's reserved bytes (cache included) on a device peak above SIZE");
  add_size_option(app, "--max-driver-peak", o.max_driver_peak,
                  "Fail when the driver-visible (NVML) memory of a device peaks above SIZE");
  app->add_option("--range", o.range,
                  "Evaluate the limits within the last START..END annotation pair NAME")
      ->type_name("NAME");
  add_size_option(app, "--max-growth", o.max_growth,
                  "Fail when live bytes grow by more than SIZE between occurrences of --mark "
                  "(without --mark: the ends of a PyTorch run's automatic steps)");
  add_size_option(app, "--max-growth-per-step", o.max_growth_per_step,
                  "Fail when a PyTorch run's tensors grow by more than SIZE a step (automatic "
                  "steps, after a warm-up); a run without automatic steps fails");
  app->add_option("--mark", o.mark,
                  "Mark (annotation name) that --max-growth measures between (default: the "
                  "automatic steps)");
  app->add_option("--warmup", o.warmup, "Occurrences of --mark to skip before measuring growth")
      ->capture_default_str()
      ->check(between(0, 1000000));
  app->add_option("--suppressions", o.suppressions, "Suppressions file (see docs/suppressions.md)");
  app->add_flag("--allow-drops", o.allow_drops,
                "Check snapshots with dropped events instead of failing them as incomplete");
  app->add_option("--junit", o.junit, "Also write JUnit XML to this file");
  app->add_flag("-f,--force", o.force, "Let --junit replace an existing file (never an input)");
  app->add_option("--format", o.format, "Output format")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json", "github"}));
}

}  // namespace cumemtrace::cli
