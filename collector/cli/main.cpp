// `cumemtrace SUBCOMMAND ...`: registers the subcommands and turns every usage error into one
// line naming the subcommand and what was wrong ("unknown subcommand 'reprot', did you mean
// 'report'?", "unknown option '--max-leak', did you mean '--max-leaked-bytes'?"), exit status 2.
// `run` takes its options up to the program name: `run -q prog -o x` gives `-o x` to prog.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "analysis/frames.h"
#include "cli/cli_checks.h"
#include "cli/commands.h"
#include "cli/log.h"
#include "cli/settings_options.h"

namespace {

using cumemtrace::cli::closest;

std::vector<std::string> visible_subcommands(CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* s : app.get_subcommands([](CLI::App*) { return true; })) {
    if (!s->get_group().empty()) names.push_back(s->get_name());
  }
  return names;
}

std::vector<std::string> option_names(const CLI::App* sub) {
  std::vector<std::string> names;
  for (const CLI::Option* o : sub->get_options()) {
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
    for (const auto& s : o->get_snames()) names.push_back("-" + s);
  }
  return names;
}

// Puts `--` before the program named after run's options, so that CLI11 hands it and everything
// after it to the program: `run -o d prog -o x` runs `prog -o x`.
void end_run_options_at_program(const CLI::App* run, std::vector<std::string>& args, size_t from) {
  for (size_t i = from; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") return;
    if (a.size() < 2 || a[0] != '-') {
      args.insert(args.begin() + static_cast<std::ptrdiff_t>(i), "--");
      return;
    }
    if (a.find('=') != std::string::npos) continue;  // --name=value
    const CLI::Option* o = run->get_option_no_throw(a);
    if (o && o->get_items_expected_min() > 0) ++i;  // its value, even one that starts with '-'
  }
}

std::string usage_error(CLI::App& app, const CLI::ParseError& e) {
  const CLI::App* sub = nullptr;
  for (const CLI::App* s : app.get_subcommands()) sub = s;
  const std::string where = sub ? fmt::format("cumemtrace {}", sub->get_name()) : "cumemtrace";
  if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
    // CLI11 lists the unexpected words, last first, after a colon.
    std::vector<std::string> extras;
    const std::string what = e.what();
    std::istringstream words(what.substr(what.find(':') + 1));
    for (std::string w; words >> w;) extras.insert(extras.begin(), w);
    for (const auto& extra : extras) {
      if (extra == "--") continue;  // run's own marker before the program
      if (extra.size() > 1 && extra[0] == '-') {
        const std::string name = extra.substr(0, extra.find('='));
        const std::string guess = sub ? closest(name, option_names(sub)) : "";
        return fmt::format("{}: unknown option '{}'{}", where, name,
                           guess.empty() ? "" : fmt::format(", did you mean '{}'?", guess));
      }
      return fmt::format("{}: unexpected argument '{}'", where, extra);
    }
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e) && sub && sub->get_name() == "run" &&
      std::string(e.what()).find("command") != std::string::npos) {
    return "cumemtrace run: expected PROGRAM [ARGS...] after the options";
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e) && !sub) {
    const auto names = visible_subcommands(app);
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    return fmt::format("cumemtrace: expected a subcommand: {}", list);
  }
  return fmt::format("{}: {}", where, e.what());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"cumemtrace: where a program's GPU memory goes", "cumemtrace"};
  app.set_version_flag("--version", CUMEMTRACE_VERSION);
  app.require_subcommand(1);
  int exit_code = 0;
  cumemtrace::cli::add_run_command(app, exit_code);
  cumemtrace::cli::add_collect_command(app, exit_code);
  cumemtrace::cli::add_report_command(app, exit_code);
  cumemtrace::cli::add_check_command(app, exit_code);
  cumemtrace::cli::add_diff_command(app, exit_code);
  cumemtrace::cli::add_snapshot_command(app, exit_code);
  cumemtrace::cli::add_html_command(app, exit_code);
  cumemtrace::cli::add_convert_command(app, exit_code);
  cumemtrace::cli::add_whatif_command(app, exit_code);
  cumemtrace::cli::add_summarize_command(app, exit_code);
  cumemtrace::cli::add_settings_command(app);

  // The offline commands' own diagnostics (what was read, in which format, how long it took):
  // CUMEMTRACE_LOG or --log-level. `run` sets its logger up itself, once its output directory
  // exists, since a relative CUMEMTRACE_LOG_FILE lives there.
  // The site rule's library paths (analysis/frames.h, set_library_code): CUMEMTRACE_LIBRARY_CODE
  // for every command (the live collector's summary included), --library-code for the offline
  // ones, which wins.
  if (const char* code = cumemtrace::settings::from_env(cumemtrace::settings::Id::kLibraryCode))
    cumemtrace::analysis::set_library_code(code);
  // The framework site's model files (frames.h, set_model_code), the same way.
  if (const char* code = cumemtrace::settings::from_env(cumemtrace::settings::Id::kModelCode))
    cumemtrace::analysis::set_model_code(code);
  for (CLI::App* s : app.get_subcommands([](CLI::App*) { return true; })) {
    if (s->get_name() == "run" || s->get_group().empty()) continue;
    s->add_option_function<std::string>(
         "--log-level", [](const std::string& level) { cumemtrace::log::init(level, ""); },
         "cumemtrace's own diagnostics: trace, debug, info, warn, error or off "
         "(default: CUMEMTRACE_LOG, else warn)")
        ->check(cumemtrace::cli::log_level_name());
    s->add_option_function<std::string>(
        "--library-code",
        [](const std::string& spec) { cumemtrace::analysis::set_library_code(spec); },
        "comma-separated path parts whose Python frames are library code, never a site; "
        "'!PART' makes them the user's (default: CUMEMTRACE_LIBRARY_CODE)");
    s->add_option_function<std::string>(
        "--model-code", [](const std::string& spec) { cumemtrace::analysis::set_model_code(spec); },
        "comma-separated path parts of a framework's model files, whose innermost line is the "
        "site when the user's own is a trainer's entry (trainer.train(), fit()); '' or ',' keeps "
        "the user's line (default: CUMEMTRACE_MODEL_CODE, else /models/)");
  }

  std::vector<std::string> args(argv + 1, argv + argc);
  const auto first = std::find_if(args.begin(), args.end(),
                                  [](const std::string& a) { return a.empty() || a[0] != '-'; });
  if (first != args.end()) {
    CLI::App* sub = nullptr;
    for (CLI::App* s : app.get_subcommands([](CLI::App*) { return true; })) {
      if (s->check_name(*first)) sub = s;
    }
    if (!sub) {
      const std::string guess = closest(*first, visible_subcommands(app));
      std::fprintf(stderr, "cumemtrace: unknown subcommand '%s'%s\n", first->c_str(),
                   guess.empty() ? "" : fmt::format(", did you mean '{}'?", guess).c_str());
      std::fprintf(stderr, "Run 'cumemtrace --help' for the list of subcommands.\n");
      return 2;
    }
    if (sub->get_name() == "run") {
      end_run_options_at_program(sub, args, static_cast<size_t>(first - args.begin()) + 1);
    } else if (!sub->get_group().empty()) {
      if (auto bad = cumemtrace::log::init("", ""); !bad.empty()) spdlog::warn("{}", bad);
    }
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes a vector in reverse order
  try {
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s\n", usage_error(app, e).c_str());
    const CLI::App* sub = nullptr;
    for (const CLI::App* s : app.get_subcommands()) sub = s;
    std::fprintf(stderr, "Run 'cumemtrace %s--help' for usage.\n",
                 sub ? (sub->get_name() + " ").c_str() : "");
    return 2;
  }
  return exit_code;
}
