#include "cli/settings_options.h"

#include <stdlib.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include <fmt/format.h>

namespace cumemtrace::cli {

namespace {

using settings::kTable;

std::string expected(const settings::Setting& s) {
  char buf[128];
  settings::describe(s, buf, sizeof buf);
  return buf;
}

std::string bad_line(const settings::Setting& s, const std::string& value) {
  char buf[192];
  settings::bad_setting_line(s, buf, sizeof buf);
  return fmt::format("{}: {}", buf, value);
}

bool user_setting(const settings::Setting& s) {
  return !(s.readers & settings::kHandOff);
}

// The row's rule as a CLI11 check: "expected 0..128, got '999'".
CLI::Validator check_of(const settings::Setting& s) {
  return CLI::Validator(
      [&s](std::string& v) -> std::string {
        settings::Value parsed;
        return settings::parse(s, v.c_str(), parsed)
                   ? std::string()
                   : fmt::format("expected {}, got '{}'", expected(s), v);
      },
      "");
}

// The row's help, and the variable that sets it too.
std::string help_of(const settings::Setting& s) {
  return fmt::format("{} (or {})", s.help, s.variable);
}

}  // namespace

const char* SettingChoices::spelled(settings::Id id) const {
  const settings::Setting& s = settings::row(id);
  if (source[i(id)] == Source::kVariable) return s.variable;
  // The long name of "-o,--output".
  const char* comma = strchr(s.flag, ',');
  return comma ? comma + 1 : s.flag;
}

void add_setting_options(CLI::App* sub, SettingChoices& c) {
  for (size_t i = 0; i < settings::kCount; ++i) {
    const settings::Setting& s = kTable[i];
    if (!*s.flag) continue;
    if (s.kind == settings::Kind::kSwitch) {
      sub->add_flag_callback(
          s.flag, [&c, i] { c.flag[i] = "1"; }, help_of(s));
      continue;
    }
    CLI::Option* o = sub->add_option(s.flag, c.flag[i], help_of(s))->check(check_of(s));
    o->type_name(s.value_name);
    if (*s.fallback) o->default_str(s.fallback);
  }
}

std::string resolve(SettingChoices& c, uint8_t& bad_reader) {
  std::string problem;
  for (size_t i = 0; i < settings::kCount; ++i) {
    const settings::Setting& s = kTable[i];
    if (!user_setting(s)) continue;
    c.source[i] = Source::kDefault;
    c.value[i].clear();
    const char* env = settings::from_env(s);
    if (!c.flag[i].empty()) {
      c.source[i] = Source::kFlag;
      c.value[i] = c.flag[i];
    } else if (env) {
      c.source[i] = Source::kVariable;
      c.value[i] = env;
    } else {
      continue;
    }
    // The Python side's own switches say a bad value themselves and turn only their feature off.
    const bool stops_tracing = s.readers & (settings::kPreload | settings::kCollector);
    if (!settings::parse(s, c.value[i].c_str(), c.parsed[i]) && problem.empty() && stops_tracing) {
      problem = bad_line(s, c.value[i]);
      bad_reader = s.readers;
    }
    c.parsed[i].text = c.value[i].c_str();
  }
  return problem;
}

void pass_on(const SettingChoices& c) {
  for (size_t i = 0; i < settings::kCount; ++i) {
    const settings::Setting& s = kTable[i];
    if (c.source[i] != Source::kFlag ||
        !(s.readers & (settings::kPreload | settings::kPythonInTarget))) {
      continue;
    }
    setenv(s.variable, c.value[i].c_str(), 1);
  }
}

std::string env_problem() {
  for (const settings::Setting& s : kTable) {
    if (!(s.readers & settings::kCollector) || !user_setting(s)) continue;
    const char* env = settings::from_env(s);
    settings::Value v;
    if (env && !settings::parse(s, env, v)) return bad_line(s, env);
  }
  return {};
}

// One line per row, tab-separated: variable, kind, default, flag, readers (preload, collector,
// python-in-target, python-package, hand-off), what a value must be, the value's name in run's
// help, the help (scripts/settings_doc.py renders README's tables from these).
void add_settings_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("__settings", "print the settings table (internal)");
  sub->group("");
  sub->callback([] {
    static constexpr const char* kKinds[] = {"switch", "count", "seconds", "size",
                                             "words",  "path",  "library", "text"};
    static constexpr const char* kReaders[] = {"preload", "collector", "python-in-target",
                                               "python-package", "hand-off"};
    for (const settings::Setting& s : kTable) {
      std::string readers;
      for (int b = 0; b < 5; ++b) {
        if (!(s.readers & (1 << b))) continue;
        readers += (readers.empty() ? "" : ",") + std::string(kReaders[b]);
      }
      fmt::print("{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n", s.variable, kKinds[static_cast<int>(s.kind)],
                 s.fallback, s.flag, readers, expected(s), s.value_name, s.help);
    }
  });
}

}  // namespace cumemtrace::cli
