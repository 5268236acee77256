#include "cli/check_options.h"

#include "cli/cli_checks.h"
#include "snapshot/size_format.h"
#include "verdicts/limits.h"

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
  for (const auto& l : analysis::limit_specs()) {
    add_size_option(app, std::string(l.flag), o.*l.member, std::string(l.help));
  }
  app->add_option("--range", o.range,
                  "Evaluate the limits within the last START..END annotation pair NAME")
      ->type_name("NAME");
  app->add_option("--mark", o.mark,
                  "Mark (annotation name) that --max-growth measures between (default: the "
                  "automatic steps)");
  app->add_option("--warmup", o.warmup, "Occurrences of --mark to skip before measuring growth")
      ->capture_default_str()
      ->check(between(0, 1000000));
  app->add_option("--module-depth", o.module_depth,
                  "Depth of the modules --max-module-bytes judges (1: the root's children)")
      ->capture_default_str()
      ->check(between(1, 64));
  app->add_option("--suppressions", o.suppressions, "Suppressions file (see docs/suppressions.md)");
  app->add_flag("--allow-drops", o.allow_drops,
                "Check snapshots with dropped events instead of failing them as incomplete");
  app->add_flag("--allow-no-cuda", o.allow_no_cuda,
                "Let limits pass when the program made no CUDA allocation (default: fail, as "
                "nothing could be judged)");
  app->add_option("--junit", o.junit, "Also write JUnit XML to this file");
  app->add_flag("-f,--force", o.force, "Let --junit replace an existing file (never an input)");
  app->add_option("--format", o.format, "Output format")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json", "github"}));
}

}  // namespace cumemtrace::cli
