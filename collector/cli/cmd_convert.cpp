// `cumemtrace convert FILE --to json|pickle|perfetto|collapsed|pprof [-o OUT]`: exports a
// snapshot to the established viewers (see viz/pickle_writer.h, viz/perfetto_writer.h,
// viz/collapsed_writer.h, viz/pprof_writer.h), or rewrites any snapshot (a PyTorch pickle, say) as
// cumemtrace's JSON through the one JSON writer (snapshot_json_writer.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <map>

#include "cli/commands.h"
#include "cli/one_output.h"
#include "io/output_file.h"
#include "snapshot/pickle_writer.h"
#include "snapshot/snapshot_json_writer.h"
#include "viz/collapsed_writer.h"
#include "viz/perfetto_writer.h"
#include "viz/pprof_writer.h"

namespace cumemtrace::cli {

void add_convert_command(CLI::App& app, int& exit_code) {
  struct Options {
    std::string input;
    std::string output;
    std::string to;
    std::string at = "peak";
    size_t stack_frames = 8;
    bool force = false;
  };
  auto opt = std::make_shared<Options>();
  auto* cmd = app.add_subcommand(
      "convert",
      "export a snapshot to JSON, pickle (PyTorch viewers), Perfetto, folded stacks or pprof");
  cmd->add_option("FILE", opt->input, "Snapshot: cumemtrace or PyTorch JSON, or a PyTorch pickle")
      ->required();
  cmd->add_option(
         "--to", opt->to,
         "json: snapshot JSON (what cumemtrace writes; reads anywhere); "
         "pickle: protocol-4 pickle for python -m torch.cuda._memory_viz and "
         "pytorch.org/memory_viz; perfetto: Chrome trace-event JSON for ui.perfetto.dev "
         "and chrome://tracing; collapsed: folded stacks for flamegraph.pl and speedscope; "
         "pprof: gzipped pprof profile for go tool pprof, Pyroscope and Parca "
         "(sample types inuse_space, peak_inuse_space, alloc_space and their _objects)")
      ->required()
      ->check(CLI::IsMember({"json", "pickle", "perfetto", "collapsed", "pprof"}));
  cmd->add_option("-o,--output", opt->output,
                  "Output file, - for stdout (default: FILE less .json/.pickle, plus .json, "
                  ".pickle, .perfetto.json, .folded or .pb.gz)");
  cmd->add_flag("-f,--force", opt->force, "Overwrite OUT if it exists (never the input)");
  cmd->add_option("--at", opt->at,
                  "collapsed: weigh stacks by bytes live at each device's peak or at exit")
      ->check(CLI::IsMember({"peak", "exit"}));
  cmd->add_option(
         "--stack-frames", opt->stack_frames,
         "perfetto: innermost frames of each allocation's stack written into its args "
         "(Perfetto shows args, not \"sf\" stacks); 0 for none, which keeps big traces small")
      ->capture_default_str();
  cmd->callback([opt, &exit_code] {
    static const std::map<std::string, std::string> kSuffix = {{"json", ".json"},
                                                               {"pickle", ".pickle"},
                                                               {"perfetto", ".perfetto.json"},
                                                               {"collapsed", ".folded"},
                                                               {"pprof", ".pb.gz"}};
    const std::string out = opt->output.empty()
                                ? io::default_output_path(opt->input, kSuffix.at(opt->to))
                                : opt->output;
    const io::OutputPolicy policy{opt->force, {opt->input}};
    std::optional<snap::Snapshot> read = read_for_output("convert", opt->input, out, policy);
    if (!read) {
      exit_code = 2;
      return;
    }
    const snap::Snapshot& s = *read;
    try {
      const uint64_t bytes = io::write_output(out, policy, [&](std::ostream& o) {
        if (opt->to == "json") {
          snap::write_json(s, o);
        } else if (opt->to == "pickle") {
          snap::write_pickle(s, o);
        } else if (opt->to == "perfetto") {
          viz::write_perfetto(s, o, {opt->stack_frames});
        } else if (opt->to == "pprof") {
          viz::write_pprof(s, o);
        } else {
          viz::write_collapsed(
              s, opt->at == "exit" ? viz::CollapsedMoment::kExit : viz::CollapsedMoment::kPeak, o);
        }
      });
      if (out != "-")
        std::fprintf(stderr, "cumemtrace convert: wrote %s (%llu bytes)\n", out.c_str(),
                     static_cast<unsigned long long>(bytes));
      exit_code = 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "cumemtrace convert: %s\n", e.what());
      exit_code = 2;
    }
  });
}

}  // namespace cumemtrace::cli
