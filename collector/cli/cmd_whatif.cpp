// `cumemtrace whatif SNAPSHOT [--alloc-conf CONF]... [--budget SIZE] [--sweep] [--needs]`:
// PyTorch's caching allocator
// replayed from the recorded requests under the run's configuration and others
// (pytorch/whatif.h); --format html: the table as a self-contained page on stdout. Exit 0 with
// the table; 2 for an unreadable file, a configuration PyTorch would refuse, or a trace the model
// cannot replay (one line saying why: no prediction is made).
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/cli_checks.h"
#include "cli/commands.h"
#include "io/snapshot_input.h"
#include "pytorch/whatif.h"
#include "snapshot/size_format.h"
#include "viz/html_report.h"

namespace cumemtrace::cli {

void add_whatif_command(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string file;
    std::string format = "text";
    std::vector<std::string> confs;
    std::string budget;
    bool sweep = false;
    bool needs = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* cmd = app.add_subcommand(
      "whatif",
      "replay PyTorch's caching allocator from a snapshot's requests under the recorded "
      "configuration and others: reserved peak, fragmentation, out of memory or not");
  cmd->add_option("SNAPSHOT", o->file,
                  "Snapshot with PyTorch's allocator events (cumemtrace JSON, or PyTorch's JSON or "
                  "pickle)")
      ->required();
  cmd->add_option("--alloc-conf", o->confs,
                  "A configuration to try, in PYTORCH_CUDA_ALLOC_CONF syntax (repeatable), e.g. "
                  "expandable_segments:True or max_split_size_mb:128")
      ->type_name("CONF")
      ->allow_extra_args(false);
  cmd->add_option(
         "--budget", o->budget,
         "Bytes PyTorch may reserve on the device for the configurations tried (12GiB, 1.5GB, "
         "bytes; below the recorded peak too); default: the recorded run's (its memory "
         "fraction, else what its first OOM shows, else none)")
      ->type_name("SIZE");
  cmd->add_flag("--sweep", o->sweep,
                "Also try the usual settings (expandable segments, max_split_size_mb, "
                "roundup_power2_divisions, garbage_collection_threshold) and rank every row");
  cmd->add_flag("--needs", o->needs,
                "For each row, the smallest budget without an OOM (bisection on the replay)");
  cmd->add_option("--format", o->format, "Output format")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json", "html"}));
  cmd->callback([o, &exit_code] {
    try {
      analysis::WhatIfOptions opts;
      opts.alloc_confs = o->confs;
      opts.sweep = o->sweep;
      opts.needs = o->needs;
      if (!o->budget.empty()) {
        opts.budget_bytes = snap::parse_bytes(o->budget);
        if (!opts.budget_bytes || *opts.budget_bytes == 0) {
          std::cerr << "cumemtrace whatif: --budget: not a size: '" << o->budget << "'\n";
          exit_code = 2;
          return;
        }
      }
      snap::Snapshot s;
      try {
        s = snap::read_snapshot_any(o->file);
      } catch (const snap::ReadError& e) {
        std::cerr << "cumemtrace whatif: " << e.what() << '\n';
        exit_code = 2;
        return;
      }
      std::vector<analysis::WhatIfDevice> r;
      try {
        r = analysis::replay_whatif(s, opts);
      } catch (const std::invalid_argument& e) {
        std::cerr << "cumemtrace whatif: --alloc-conf: " << e.what() << '\n';
        exit_code = 2;
        return;
      } catch (const analysis::CannotReplay& e) {
        std::cerr << "cumemtrace whatif: " << o->file << ": cannot replay: " << e.what() << '\n';
        exit_code = 2;
        return;
      }
      const analysis::SiteTable sites(s);
      if (o->format == "json") {
        analysis::print_whatif_json(r, sites, std::cout);
      } else if (o->format == "html") {
        std::cout << viz::render_whatif_html(r, s, o->file.substr(o->file.rfind('/') + 1));
      } else {
        analysis::print_whatif_text(r, s, sites, o->file, std::cout);
      }
      std::cout.flush();
      exit_code = std::cout ? 0 : 2;
    } catch (const std::exception& e) {
      std::cerr << "cumemtrace whatif: " << e.what() << '\n';
      exit_code = 2;
    }
  });
}

}  // namespace cumemtrace::cli
